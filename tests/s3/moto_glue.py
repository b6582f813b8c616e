"""moto_server whose Glue enforces UpdateTable's VersionId, as AWS does.

moto (PyPI `moto[server]` 5.2.5) accepts `UpdateTable` whatever `VersionId` it carries, so a
compare-and-swap against a table that changed meanwhile would win there and lose a commit. Real
Glue refuses it with ConcurrentModificationException. This launcher makes moto do the same before
starting the server (with IAM enforcement after INITIAL_NO_AUTH_ACTION_COUNT requests, so every
request must carry a valid SigV4 signature of a user allowed glue:*).

Usage: python moto_glue.py PORT
"""

import os
import sys

from moto.glue import responses as glue_responses
from moto.glue.exceptions import GlueClientError


class ConcurrentModificationException(GlueClientError):
    def __init__(self, message: str):
        super().__init__("ConcurrentModificationException", message)


_original_update_table = glue_responses.GlueResponse.update_table


def _update_table(self):
    race = os.environ.get("MOTO_GLUE_RACE_LOG")
    table_input = self.parameters.get("TableInput") or {}
    if race and "icegate.migration.fenced" in (table_input.get("Parameters") or {}) and not os.path.exists(race):
        # A writer's commit lands between icegate's read and its swap (once): the table's version
        # moves on, its metadata stays.
        table = self.glue_backend.get_table(self.parameters.get("DatabaseName"), table_input.get("Name"))
        current = dict(table.get_version(str(table._current_version)))
        current["Parameters"] = {**current.get("Parameters", {}), "last-writer": "racing"}
        table.update(current)
        with open(race, "w") as log:
            log.write(f"raced {table_input.get('Name')} to version {table._current_version}\n")
    expected = self.parameters.get("VersionId")
    if expected is not None:
        table_input = self.parameters.get("TableInput") or {}
        table = self.glue_backend.get_table(self.parameters.get("DatabaseName"), table_input.get("Name"))
        if str(table._current_version) != str(expected):
            raise ConcurrentModificationException(
                f"Update table failed due to concurrent modifications: version {expected}, current "
                f"{table._current_version}"
            )
    return _original_update_table(self)


glue_responses.GlueResponse.update_table = _update_table


if __name__ == "__main__":
    from moto.server import main

    main(["-H", "127.0.0.1", "-p", sys.argv[1]])
