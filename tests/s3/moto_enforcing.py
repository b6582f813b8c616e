"""moto_server with IAM enforcement that also enforces STS session policies and expiry.

moto (PyPI `moto[server]`) authenticates and authorizes every request after the first
INITIAL_NO_AUTH_ACTION_COUNT ones, with its own IAM policy evaluator. For credentials from
AssumeRole it evaluates only the role's policies: it stores the inline session policy of the call
but never looks at it, and it ignores the credentials' expiry. Real AWS grants the intersection of
role policies and session policy, and refuses expired credentials. This launcher closes both gaps
before starting the server, so that the scoping of icegate's vended credentials is enforced by the
store under test:

- a request with assumed-role credentials must also be PERMITTED by the session policy (moto's
  `IAMPolicy` evaluator), and
- conditions are evaluated fail-closed for the operators such policies use (`StringEquals`,
  `StringLike`), with the `s3:prefix` key taken from the request's query string; an unknown
  operator or a missing key does not match (moto would otherwise ignore the condition);
- credentials past their expiry are refused with `ExpiredToken`. The clock can be moved forward
  by writing a number of seconds to the file named by MOTO_CLOCK_OFFSET_FILE (the tests use it to
  let credentials expire without waiting an hour);
- moto ignores an AssumeRole's session tags and source identity: each call's session name,
  source identity and tags are written as a JSON line to the file named by MOTO_STS_LOG, with the
  access key id it returned, for the tests to read what STS was asked for.

Usage: python moto_enforcing.py PORT   (INITIAL_NO_AUTH_ACTION_COUNT in the environment)
"""

import datetime
import json
import os
import re
import sys
from urllib.parse import parse_qs, urlparse

from moto.core.utils import utcnow
from moto.iam import access_control as ac
from moto.s3.exceptions import S3ClientError
from moto.sts.models import sts_backends


def clock_offset() -> float:
    path = os.environ.get("MOTO_CLOCK_OFFSET_FILE")
    try:
        with open(path) as f:  # type: ignore[arg-type]
            return float(f.read().strip() or 0)
    except (TypeError, OSError, ValueError):
        return 0.0


class ExpiredToken(S3ClientError):
    code = 400

    def __init__(self) -> None:
        super().__init__("ExpiredToken", "The provided token has expired.")


_original_init = ac.AssumedRoleAccessKey.__init__


def _init(self, account_id, partition, access_key_id, headers):
    _original_init(self, account_id, partition, access_key_id, headers)
    for role in sts_backends[account_id][partition].assumed_roles:
        if role.access_key_id == access_key_id:
            self._session_policy = role.policy
            if role.expiration <= utcnow() + datetime.timedelta(seconds=clock_offset()):
                raise ac.CreateAccessKeyFailure(reason="ExpiredToken")


ac.AssumedRoleAccessKey.__init__ = _init

_original_invalid = ac.S3IAMRequest._raise_invalid_access_key


def _invalid(self, reason):
    if reason == "ExpiredToken":
        raise ExpiredToken()
    _original_invalid(self, reason)


ac.S3IAMRequest._raise_invalid_access_key = _invalid


def _iam_pattern(pattern: str) -> re.Pattern:
    """An IAM wildcard pattern (`*`, `?`, and the escapes `${*}`, `${?}`, `${$}`) as a regex."""
    out, i = "", 0
    while i < len(pattern):
        if pattern.startswith(("${*}", "${?}", "${$}"), i):
            out += re.escape(pattern[i + 2])
            i += 4
        elif pattern[i] == "*":
            out, i = out + ".*", i + 1
        elif pattern[i] == "?":
            out, i = out + ".", i + 1
        else:
            out, i = out + re.escape(pattern[i]), i + 1
    return re.compile(f"^{out}$", re.DOTALL)


def _check_conditions(self, incoming):
    conditions = self._statement.get("Condition")
    if not conditions:
        return True
    for operator, pairs in conditions.items():
        for key, expected in pairs.items():
            expected = expected if isinstance(expected, list) else [expected]
            actual = (incoming or {}).get(key)
            if actual is None:
                return False
            if operator == "StringEquals":
                matched = actual in expected
            elif operator == "StringLike":
                matched = any(_iam_pattern(e).match(actual) for e in expected)
            else:
                return False
            if not matched:
                return False
    return True


ac.IAMPolicyStatement._check_conditions = _check_conditions


def _request_conditions(request) -> dict:
    values = {}
    query = parse_qs(urlparse(request._path).query, keep_blank_values=True)
    if "prefix" in query:
        values["s3:prefix"] = query["prefix"][0]
    elif request._service == "s3":
        values["s3:prefix"] = ""
    return values


_original_check = ac.IAMRequestBase.check_action_permitted


def _check(self, resource):
    _original_check(self, resource)
    policy = getattr(self._access_key, "_session_policy", None)
    if policy and self._action != "sts:GetCallerIdentity":
        result = ac.IAMPolicy(policy).is_action_permitted(
            self._action, resource, incoming_condition_values=_request_conditions(self)
        )
        if result != ac.PermissionResult.PERMITTED:
            self._raise_access_denied()


ac.IAMRequestBase.check_action_permitted = _check


from moto.sts import responses as sts_responses

_original_assume_role = sts_responses.TokenResponse.assume_role


def _assume_role(self):
    result = _original_assume_role(self)
    path = os.environ.get("MOTO_STS_LOG")
    if path:
        query = self.querystring
        tags = {}
        for key, values in query.items():
            member = re.fullmatch(r"Tags\.member\.(\d+)\.Key", key)
            if member:
                tags[values[0]] = query.get(f"Tags.member.{member.group(1)}.Value", [""])[0]
        line = {
            "session-name": self._get_param("RoleSessionName"),
            "source-identity": self._get_param("SourceIdentity"),
            "tags": tags,
            "access-key-id": result.result["Credentials"].access_key_id,
        }
        with open(path, "a") as log:
            log.write(json.dumps(line) + "\n")
    return result


sts_responses.TokenResponse.assume_role = _assume_role


if __name__ == "__main__":
    from moto.server import main

    main(["-H", "127.0.0.1", "-p", sys.argv[1]])
