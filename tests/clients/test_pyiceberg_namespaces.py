"""PyIceberg 0.12 manages namespaces through a freshly started icegate, on both stores."""

import pytest
from pyiceberg.catalog import load_catalog
from pyiceberg.exceptions import NamespaceAlreadyExistsError, NamespaceNotEmptyError, NoSuchNamespaceError


@pytest.fixture
def catalog(icegate):
    return load_catalog("icegate", type="rest", uri=icegate.uri, warehouse="default")


def test_nested_namespaces_are_created_listed_and_dropped(catalog):
    catalog.create_namespace("sales", {"owner": "data-eng"})
    catalog.create_namespace(("sales", "emea"))
    catalog.create_namespace(("sales", "emea", "fr"))
    catalog.create_namespace(("sales", "apac"))
    catalog.create_namespace("marketing")

    assert catalog.list_namespaces() == [("marketing",), ("sales",)]
    assert catalog.list_namespaces("sales") == [("sales", "apac"), ("sales", "emea")]
    assert catalog.list_namespaces(("sales", "emea")) == [("sales", "emea", "fr")]
    assert catalog.list_namespaces(("sales", "emea", "fr")) == []
    assert catalog.namespace_exists(("sales", "emea", "fr"))
    assert not catalog.namespace_exists(("sales", "nowhere"))

    with pytest.raises(NamespaceNotEmptyError):
        catalog.drop_namespace("sales")
    catalog.drop_namespace(("sales", "emea", "fr"))
    catalog.drop_namespace(("sales", "emea"))
    catalog.drop_namespace(("sales", "apac"))
    catalog.drop_namespace("sales")
    assert catalog.list_namespaces() == [("marketing",)]
    with pytest.raises(NoSuchNamespaceError):
        catalog.load_namespace_properties("sales")


def test_namespace_properties_are_updated_and_removed(catalog):
    catalog.create_namespace("props", {"owner": "alice", "tier": "gold"})
    assert catalog.load_namespace_properties("props") == {"owner": "alice", "tier": "gold"}

    summary = catalog.update_namespace_properties("props", removals={"tier", "ghost"}, updates={"owner": "bob", "new": "1"})
    assert sorted(summary.updated) == ["new", "owner"]
    assert summary.removed == ["tier"]
    assert summary.missing == ["ghost"]
    assert catalog.load_namespace_properties("props") == {"owner": "bob", "new": "1"}


def test_errors_map_to_pyiceberg_exceptions(catalog):
    catalog.create_namespace("dup")
    with pytest.raises(NamespaceAlreadyExistsError):
        catalog.create_namespace("dup")
    with pytest.raises(NoSuchNamespaceError):
        catalog.drop_namespace("never-created")
    with pytest.raises(NoSuchNamespaceError):
        catalog.update_namespace_properties("never-created", updates={"a": "b"})
