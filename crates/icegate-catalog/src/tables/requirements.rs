//! Commit requirements checked as the Iceberg reference checks them, failing with its messages.
//!
//! Clients and their test suites match on the reference's wording (`UpdateRequirement.java`),
//! so every requirement fails here with exactly its text: `Requirement failed: default partition
//! spec changed: expected id 0 != 1`, `Requirement failed: branch main has changed: expected id
//! 1 != 2`, `Requirement failed: table already exists`, ... The `iceberg` crate's own checks say
//! the same things in other words.

use iceberg::TableRequirement;
use iceberg::spec::TableMetadata;

use super::document::Refs;
use crate::error::{CatalogError, Result};

fn failed(message: String) -> CatalogError {
    CatalogError::CommitFailed(format!("Requirement failed: {message}"))
}

/// Checks `requirement` against `base`, the table's current metadata (`None`: the table does not
/// exist). `refs` gives the table's refs, read only when a ref requirement fails (its message
/// says whether the ref is a branch or a tag).
pub(crate) fn check(
    requirement: &TableRequirement,
    base: Option<&TableMetadata>,
    refs: impl FnOnce() -> Option<Refs>,
) -> Result<()> {
    let Some(base) = base else {
        return match requirement {
            TableRequirement::NotExist => Ok(()),
            // The reference has no answer of its own (it reads the missing metadata); the table
            // a requirement speaks of is not there.
            _ => Err(failed("table does not exist".into())),
        };
    };
    match requirement {
        TableRequirement::NotExist => Err(failed("table already exists".into())),
        TableRequirement::UuidMatch { uuid } if *uuid != base.uuid() => {
            // The reference names the table's UUID first.
            Err(failed(format!("UUID does not match: expected {} != {uuid}", base.uuid())))
        }
        TableRequirement::RefSnapshotIdMatch { r#ref, snapshot_id } => {
            let current = base.snapshot_for_ref(r#ref).map(|s| s.snapshot_id());
            match (current, snapshot_id) {
                (Some(current), Some(expected)) if current == *expected => Ok(()),
                (None, None) => Ok(()),
                (Some(current), expected) => {
                    let kind = match refs().and_then(|refs| refs.get(r#ref).map(|r| r.is_branch())) {
                        Some(false) => "tag",
                        _ => "branch",
                    };
                    Err(match expected {
                        None => failed(format!("{kind} {ref} was created concurrently")),
                        Some(expected) => {
                            failed(format!("{kind} {ref} has changed: expected id {expected} != {current}"))
                        }
                    })
                }
                (None, Some(expected)) => Err(failed(format!("branch or tag {ref} is missing, expected {expected}"))),
            }
        }
        TableRequirement::LastAssignedFieldIdMatch { last_assigned_field_id }
            if *last_assigned_field_id != base.last_column_id() =>
        {
            Err(failed(format!(
                "last assigned field id changed: expected id {last_assigned_field_id} != {}",
                base.last_column_id()
            )))
        }
        TableRequirement::CurrentSchemaIdMatch { current_schema_id }
            if *current_schema_id != base.current_schema_id() =>
        {
            Err(failed(format!(
                "current schema changed: expected id {current_schema_id} != {}",
                base.current_schema_id()
            )))
        }
        TableRequirement::LastAssignedPartitionIdMatch { last_assigned_partition_id }
            if *last_assigned_partition_id != base.last_partition_id() =>
        {
            Err(failed(format!(
                "last assigned partition id changed: expected id {last_assigned_partition_id} != {}",
                base.last_partition_id()
            )))
        }
        TableRequirement::DefaultSpecIdMatch { default_spec_id }
            if *default_spec_id != base.default_partition_spec_id() =>
        {
            Err(failed(format!(
                "default partition spec changed: expected id {default_spec_id} != {}",
                base.default_partition_spec_id()
            )))
        }
        TableRequirement::DefaultSortOrderIdMatch { default_sort_order_id }
            if *default_sort_order_id != base.default_sort_order_id() =>
        {
            Err(failed(format!(
                "default sort order changed: expected id {default_sort_order_id} != {}",
                base.default_sort_order_id()
            )))
        }
        _ => Ok(()),
    }
}

/// The reference's failure of a view's `assert-view-uuid`.
pub(crate) fn view_uuid_mismatch(current: uuid::Uuid, expected: uuid::Uuid) -> CatalogError {
    failed(format!("view UUID does not match: expected {current} != {expected}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> TableMetadata {
        serde_json::from_value(serde_json::json!({
            "format-version": 2, "table-uuid": "9c12d441-03fe-4693-9a96-a0705ddf69c1", "location": "file:///w/t",
            "last-sequence-number": 2, "last-updated-ms": 1, "last-column-id": 3, "current-schema-id": 1,
            "schemas": [{"type": "struct", "schema-id": 1, "fields": [{"id": 1, "name": "a", "required": false, "type": "int"}]}],
            "default-spec-id": 1, "partition-specs": [{"spec-id": 1, "fields": []}], "last-partition-id": 1000,
            "default-sort-order-id": 0, "sort-orders": [{"order-id": 0, "fields": []}],
            "current-snapshot-id": 2,
            "snapshots": [
                {"snapshot-id": 1, "sequence-number": 1, "timestamp-ms": 1, "manifest-list": "m1", "summary": {"operation": "append"}},
                {"snapshot-id": 2, "parent-snapshot-id": 1, "sequence-number": 2, "timestamp-ms": 2, "manifest-list": "m2", "summary": {"operation": "append"}}
            ],
            "refs": {"main": {"snapshot-id": 2, "type": "branch"}, "v1": {"snapshot-id": 1, "type": "tag"}}
        }))
        .unwrap()
    }

    fn message(requirement: serde_json::Value, base: Option<&TableMetadata>) -> Option<String> {
        let requirement: TableRequirement = serde_json::from_value(requirement).unwrap();
        let refs = || base.map(|b| super::super::document::refs_of(&serde_json::to_string(b).unwrap(), b).unwrap());
        check(&requirement, base, refs).err().map(|e| match e {
            CatalogError::CommitFailed(message) => message,
            other => panic!("not a commit failure: {other:?}"),
        })
    }

    #[test]
    fn failed_requirements_say_what_the_reference_says() {
        use serde_json::json;
        let t = table();
        let cases = [
            (json!({"type": "assert-create"}), "Requirement failed: table already exists"),
            (
                json!({"type": "assert-table-uuid", "uuid": "00000000-0000-0000-0000-000000000001"}),
                "Requirement failed: UUID does not match: expected 9c12d441-03fe-4693-9a96-a0705ddf69c1 != 00000000-0000-0000-0000-000000000001",
            ),
            (
                json!({"type": "assert-ref-snapshot-id", "ref": "main", "snapshot-id": 1}),
                "Requirement failed: branch main has changed: expected id 1 != 2",
            ),
            (
                json!({"type": "assert-ref-snapshot-id", "ref": "v1", "snapshot-id": 2}),
                "Requirement failed: tag v1 has changed: expected id 2 != 1",
            ),
            (
                json!({"type": "assert-ref-snapshot-id", "ref": "main", "snapshot-id": null}),
                "Requirement failed: branch main was created concurrently",
            ),
            (
                json!({"type": "assert-ref-snapshot-id", "ref": "dev", "snapshot-id": 7}),
                "Requirement failed: branch or tag dev is missing, expected 7",
            ),
            (
                json!({"type": "assert-last-assigned-field-id", "last-assigned-field-id": 2}),
                "Requirement failed: last assigned field id changed: expected id 2 != 3",
            ),
            (
                json!({"type": "assert-current-schema-id", "current-schema-id": 0}),
                "Requirement failed: current schema changed: expected id 0 != 1",
            ),
            (
                json!({"type": "assert-last-assigned-partition-id", "last-assigned-partition-id": 999}),
                "Requirement failed: last assigned partition id changed: expected id 999 != 1000",
            ),
            (
                json!({"type": "assert-default-spec-id", "default-spec-id": 0}),
                "Requirement failed: default partition spec changed: expected id 0 != 1",
            ),
            (
                json!({"type": "assert-default-sort-order-id", "default-sort-order-id": 1}),
                "Requirement failed: default sort order changed: expected id 1 != 0",
            ),
        ];
        for (requirement, expected) in cases {
            assert_eq!(message(requirement.clone(), Some(&t)).as_deref(), Some(expected), "{requirement}");
        }
        for holds in [
            json!({"type": "assert-table-uuid", "uuid": "9c12d441-03fe-4693-9a96-a0705ddf69c1"}),
            json!({"type": "assert-ref-snapshot-id", "ref": "main", "snapshot-id": 2}),
            json!({"type": "assert-ref-snapshot-id", "ref": "dev", "snapshot-id": null}),
            json!({"type": "assert-default-spec-id", "default-spec-id": 1}),
        ] {
            assert_eq!(message(holds.clone(), Some(&t)), None, "{holds}");
        }
        assert_eq!(message(json!({"type": "assert-create"}), None), None);
    }
}
