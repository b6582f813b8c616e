"""PyIceberg 0.12's view support (create, list, exists, load, drop) through icegate."""

import pytest
from pyiceberg.catalog import load_catalog
from pyiceberg.exceptions import NoSuchViewError, ViewAlreadyExistsError
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField
from pyiceberg.view.metadata import SQLViewRepresentation, ViewVersion

SCHEMA = Schema(NestedField(1, "n", LongType(), required=False))


def version(sql: str) -> ViewVersion:
    return ViewVersion(
        schema_id=0,
        summary={"engine-name": "pyiceberg"},
        representations=[SQLViewRepresentation(type="sql", sql=sql, dialect="spark")],
        default_namespace=["db"],
    )


def test_views_are_created_listed_loaded_and_dropped(icegate):
    catalog = load_catalog("icegate", type="rest", uri=icegate.uri, warehouse="default")
    catalog.create_namespace("db")
    view = catalog.create_view("db.recent", SCHEMA, version("SELECT 1 AS n"), properties={"owner": "bi"})
    assert view.metadata.properties["owner"] == "bi"
    with pytest.raises(ViewAlreadyExistsError):
        catalog.create_view("db.recent", SCHEMA, version("SELECT 2 AS n"))
    assert catalog.list_views("db") == [("db", "recent")]
    assert catalog.view_exists("db.recent")
    loaded = catalog.load_view("db.recent")
    current = next(v for v in loaded.metadata.versions if v.version_id == loaded.metadata.current_version_id)
    assert current.representations[0].root.sql == "SELECT 1 AS n"
    catalog.drop_view("db.recent")
    assert not catalog.view_exists("db.recent")
    with pytest.raises(NoSuchViewError):
        catalog.drop_view("db.recent")
