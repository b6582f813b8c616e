//! The compare-and-swap of a table's or view's metadata pointer, defined once.
//!
//! A swap is the guarded update ([`GUARD`]: it applies only to the row with the table's id,
//! the expected metadata location, and the name and namespace the commit was addressed to),
//! then, for a swap that applied, the rows that go with it in its transaction ([`APPLIED`]).
//! Every way a swap runs executes exactly these statements: a multi-table commit and a swap
//! run alone through sqlx ([`apply`]), a group on the SQLite committer's own connection
//! ([`apply_sqlite`]), and a group on PostgreSQL, whose one-statement function is generated
//! from them ([`postgres_group`]). Adding a row to every swap's transaction is one entry in
//! [`APPLIED`].

use std::sync::LazyLock;

use icegate_catalog::store::MetadataSwap;
use sqlx::Any;

use crate::audit::Entry;

/// A value one of the statements binds.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Value<'a> {
    Text(&'a str),
    Bytes(Option<&'a [u8]>),
    Int(i64),
}

/// A parameter of the swap's statements: its name (the PostgreSQL function's argument is
/// `p_<name>`), its PostgreSQL type, and its value for a swap at a time.
pub(crate) struct Param {
    name: &'static str,
    pg_type: &'static str,
    value: for<'a> fn(&'a MetadataSwap, i64) -> Value<'a>,
}

/// The time the swap is stamped with: the one parameter shared by a whole group.
const NOW: Param = Param { name: "now", pg_type: "BIGINT", value: |_, now| Value::Int(now) };
const METADATA_LOCATION: Param =
    Param { name: "metadata_location", pg_type: "TEXT", value: |s, _| Value::Text(&s.metadata_location) };
/// A document stored compressed leaves the text column empty.
const DOCUMENT: Param = Param {
    name: "document",
    pg_type: "TEXT",
    value: |s, _| Value::Text(if s.metadata_gzip.is_some() { "" } else { &s.metadata }),
};
const GZIP: Param = Param { name: "gzip", pg_type: "BYTEA", value: |s, _| Value::Bytes(s.metadata_gzip.as_deref()) };
const LOCATION: Param = Param { name: "location", pg_type: "TEXT", value: |s, _| Value::Text(&s.location) };
const ID: Param = Param { name: "id", pg_type: "TEXT", value: |s, _| Value::Text(&s.id) };
const EXPECTED: Param =
    Param { name: "expected", pg_type: "TEXT", value: |s, _| Value::Text(&s.expected_metadata_location) };
const NAME: Param = Param { name: "name", pg_type: "TEXT", value: |s, _| Value::Text(&s.name) };
const WAREHOUSE_ID: Param = Param { name: "warehouse_id", pg_type: "TEXT", value: |s, _| Value::Text(&s.warehouse_id) };
// The namespace's encoded name is made per bind (`Value` borrows): see `namespace_value`.
const NAMESPACE: Param = Param { name: "namespace", pg_type: "TEXT", value: |_, _| Value::Text("") };

/// One statement of a swap: `$n` in `sql` is `params[n - 1]`, and each `$n` first appears
/// after `$1` .. `$n-1` (SQLite numbers parameters in order of first appearance).
pub(crate) struct Statement {
    sql: &'static str,
    params: &'static [Param],
}

/// The compare-and-swap: it applies only to the row that still has the expected metadata
/// location, under the name the commit was addressed to (the commit may have been staged on a
/// head remembered in memory, not read: a rename elsewhere must make it conflict). It changes
/// one row or none.
pub(crate) const GUARD: Statement = Statement {
    sql: "UPDATE tabulars SET metadata_location = $1, metadata = $2, metadata_gzip = $3, location = $4, \
          updated_at = $5 WHERE id = $6 AND metadata_location = $7 AND name = $8 \
          AND namespace_id = (SELECT n.id FROM namespaces n WHERE n.warehouse_id = $9 AND n.name = $10)",
    params: &[METADATA_LOCATION, DOCUMENT, GZIP, LOCATION, NOW, ID, EXPECTED, NAME, WAREHOUSE_ID, NAMESPACE],
};

/// What a swap that applied writes beside it, in its transaction, in order (none yet).
pub(crate) const APPLIED: &[Statement] = &[];

/// A parameter's value for `swap`; `namespace` is the swap's namespace, encoded.
fn value<'a>(param: &Param, swap: &'a MetadataSwap, namespace: &'a str, now: i64) -> Value<'a> {
    if param.name == NAMESPACE.name { Value::Text(namespace) } else { (param.value)(swap, now) }
}

fn bind<'q>(
    statement: &'q Statement,
    swap: &'q MetadataSwap,
    namespace: &'q str,
    now: i64,
) -> sqlx::query::Query<'q, Any, sqlx::any::AnyArguments> {
    let mut query = sqlx::query(statement.sql);
    for param in statement.params {
        query = match value(param, swap, namespace, now) {
            Value::Text(text) => query.bind(text),
            Value::Bytes(bytes) => query.bind(bytes),
            Value::Int(int) => query.bind(int),
        };
    }
    query
}

/// Runs one swap on `conn`, inside the caller's transaction: whether it applied. One that
/// applied appends its audit record (`audit`), when it carries one, to the chain.
pub(crate) async fn apply(
    conn: &mut sqlx::AnyConnection,
    backend: crate::Backend,
    (swap, audit): (&MetadataSwap, Option<&Entry>),
    now: i64,
) -> Result<bool, sqlx::Error> {
    let namespace = swap.namespace.encoded();
    let done = bind(&GUARD, swap, &namespace, now).execute(&mut *conn).await?;
    if done.rows_affected() != 1 {
        return Ok(false);
    }
    for statement in APPLIED {
        bind(statement, swap, &namespace, now).execute(&mut *conn).await?;
    }
    if let Some(entry) = audit {
        crate::audit::append_on(conn, backend, &[entry]).await?;
    }
    Ok(true)
}

/// [`apply`] on a `rusqlite` connection (the SQLite group committer's own), in its transaction.
pub(crate) fn apply_sqlite(
    tx: &rusqlite::Transaction<'_>,
    (swap, audit): (&MetadataSwap, Option<&Entry>),
    now: i64,
) -> rusqlite::Result<bool> {
    let namespace = swap.namespace.encoded();
    let run = |statement: &Statement| -> rusqlite::Result<usize> {
        // Borrowed: a commit's document (and its gzip form) is not copied to be bound.
        use rusqlite::types::{ToSqlOutput, ValueRef};
        let values: Vec<ToSqlOutput<'_>> = statement
            .params
            .iter()
            .map(|param| {
                ToSqlOutput::Borrowed(match value(param, swap, &namespace, now) {
                    Value::Text(text) => ValueRef::Text(text.as_bytes()),
                    Value::Bytes(Some(bytes)) => ValueRef::Blob(bytes),
                    Value::Bytes(None) => ValueRef::Null,
                    Value::Int(int) => ValueRef::Integer(int),
                })
            })
            .collect();
        tx.prepare_cached(statement.sql)?.execute(rusqlite::params_from_iter(values))
    };
    if run(&GUARD)? != 1 {
        return Ok(false);
    }
    for statement in APPLIED {
        run(statement)?;
    }
    if let Some(entry) = audit {
        crate::audit::append_sqlite(tx, &[entry])?;
    }
    Ok(true)
}

/// The PostgreSQL group function generated from the statements above: its name (which ends
/// in a hash of its definition, so servers of different versions sharing a database each call
/// their own), its `CREATE` statement (for the schema the migrations made the tables in:
/// [`GroupFunction::create_in`]) and its array parameters in order.
pub(crate) struct GroupFunction {
    pub(crate) name: String,
    /// `CREATE OR REPLACE FUNCTION ...` with `{search_path}` still to be filled in.
    create: String,
    /// After `p_token` and `p_now`: one array per parameter, in this order.
    params: Vec<&'static Param>,
}

/// See [`GroupFunction`]. The function runs a group of swaps in one statement: it fences itself
/// with the group's token (`swap_fences`, see `group_commit`), locks the group's rows that no
/// other transaction holds, by id, never waiting, then runs each swap whose row it locked, in
/// the order given, each against the row as the ones before it left it. The answer says, per
/// swap: 1 applied, 0 conflicted, 2 not run (its row was held, or is gone; the caller runs
/// those alone). It runs with the caller's rights and with a search path of the tables' schema
/// alone (then `pg_temp`, last), so no session can point its statements at other tables of the
/// same names (`$user`, or a temporary table, which PostgreSQL would otherwise search first).
pub(crate) static POSTGRES_GROUP: LazyLock<GroupFunction> = LazyLock::new(|| {
    let mut params: Vec<&'static Param> = Vec::new();
    for statement in std::iter::once(&GUARD).chain(APPLIED) {
        for param in statement.params {
            if param.name != NOW.name && !params.iter().any(|p| p.name == param.name) {
                params.push(param);
            }
        }
    }
    // `$n` of a statement: the group's value of its parameter for swap `i`.
    let in_group = |statement: &Statement| {
        let mut sql = statement.sql.to_owned();
        // Highest first, so `$1` does not match the start of `$10`.
        for (index, param) in statement.params.iter().enumerate().rev() {
            let value = if param.name == NOW.name { "p_now".to_owned() } else { format!("p_{}[i]", param.name) };
            sql = sql.replace(&format!("${}", index + 1), &value);
        }
        sql
    };
    let arguments: String = params.iter().map(|p| format!(", p_{} {}[]", p.name, p.pg_type)).collect::<String>()
        + ", p_audit_at BIGINT[], p_audit_operation TEXT[], p_audit_principal TEXT[], p_audit_actor TEXT[], \
           p_audit_record TEXT[], p_audit_warehouse TEXT[], p_audit_resource TEXT[], p_audit_outcome TEXT[]";
    let applied: String = APPLIED.iter().map(|s| format!("            {};\n", in_group(s))).collect();
    let body = format!(
        "DECLARE
    locked  TEXT[];
    outcome SMALLINT[] := '{{}}';
    a_seq   BIGINT;
    a_hash  TEXT;
BEGIN
    INSERT INTO swap_fences (token, created_at) VALUES (p_token, p_now);
    SELECT coalesce(array_agg(free.id), '{{}}') INTO locked
      FROM (SELECT t.id FROM tabulars t WHERE t.id = ANY (p_id)
             ORDER BY t.id FOR NO KEY UPDATE SKIP LOCKED) AS free;
    FOR i IN 1 .. coalesce(array_length(p_id, 1), 0) LOOP
        IF NOT (p_id[i] = ANY (locked)) THEN
            outcome := outcome || 2::SMALLINT;
            CONTINUE;
        END IF;
        {guard};
        IF FOUND THEN
{applied}            IF p_audit_record[i] IS NOT NULL THEN
                IF a_seq IS NULL THEN
                    SELECT seq, hash INTO a_seq, a_hash FROM audit_head WHERE id = 1 FOR UPDATE;
                END IF;
                a_seq := a_seq + 1;
                a_hash := encode(sha256(convert_to(a_hash || chr(10) || p_audit_record[i], 'UTF8')), 'hex');
                INSERT INTO audit_log (seq, at_ms, operation, principal_id, actor, warehouse_id, resource,
                                       outcome, record, hash)
                     VALUES (a_seq, p_audit_at[i], p_audit_operation[i], p_audit_principal[i], p_audit_actor[i],
                             p_audit_warehouse[i], p_audit_resource[i], p_audit_outcome[i], p_audit_record[i], a_hash);
            END IF;
            outcome := outcome || 1::SMALLINT;
        ELSE
            outcome := outcome || 0::SMALLINT;
        END IF;
    END LOOP;
    IF a_seq IS NOT NULL THEN
        UPDATE audit_head SET seq = a_seq, hash = a_hash WHERE id = 1;
    END IF;
    DELETE FROM swap_fences WHERE token = p_token;
    RETURN outcome;
END",
        guard = in_group(&GUARD),
    );
    let signature = format!("(p_token TEXT, p_now BIGINT{arguments}) RETURNS SMALLINT[]");
    let name = format!("icegate_swap_group_{:016x}", fnv1a(format!("{signature}{body}").as_bytes()));
    let create = format!(
        "CREATE OR REPLACE FUNCTION {name}{signature}\nLANGUAGE plpgsql\nSET lock_timeout = '200ms'\n\
         SET search_path = {{search_path}}\nAS $icegate$\n{body}\n$icegate$"
    );
    GroupFunction { name, create, params }
});

/// 64-bit FNV-1a: a stable name for a definition (not a security property).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, byte| (hash ^ u64::from(*byte)).wrapping_mul(0x0100_0000_01b3))
}

impl GroupFunction {
    /// The `CREATE` statement for tables in `schema`.
    pub(crate) fn create_in(&self, schema: &str) -> String {
        let quoted = format!("\"{}\"", schema.replace('"', "\"\""));
        self.create.replace("{search_path}", &format!("{quoted}, pg_temp"))
    }

    /// The call of the function for `swaps`, in the order given, under fence `token`.
    pub(crate) fn call<'q>(
        &'q self,
        token: &'q str,
        swaps: &[(&'q MetadataSwap, Option<&'q Entry>)],
        namespaces: &'q [String],
        now: i64,
    ) -> sqlx::query::QueryScalar<'q, sqlx::Postgres, Vec<i16>, sqlx::postgres::PgArguments> {
        let placeholders: Vec<String> = (1..=self.params.len() + 10).map(|n| format!("${n}")).collect();
        let sql = format!("SELECT {}({})", self.name, placeholders.join(", "));
        let mut query = sqlx::query_scalar::<_, Vec<i16>>(sqlx::AssertSqlSafe(sql)).bind(token).bind(now);
        for param in &self.params {
            let values = swaps.iter().zip(namespaces).map(|((swap, _), namespace)| value(param, swap, namespace, now));
            query = match param.pg_type {
                "BYTEA" => query
                    .bind(values.map(|v| if let Value::Bytes(bytes) = v { bytes } else { None }).collect::<Vec<_>>()),
                "BIGINT" => {
                    query.bind(values.map(|v| if let Value::Int(int) = v { int } else { 0 }).collect::<Vec<i64>>())
                }
                _ => {
                    query.bind(values.map(|v| if let Value::Text(text) = v { text } else { "" }).collect::<Vec<&str>>())
                }
            };
        }
        // Each swap's audit record (NULL: none), as the chain's columns.
        let audits: Vec<_> = swaps.iter().map(|(_, audit)| audit.map(Entry::columns)).collect();
        query
            .bind(audits.iter().map(|a| a.map(|a| a.0)).collect::<Vec<Option<i64>>>())
            .bind(audits.iter().map(|a| a.and_then(|a| a.1)).collect::<Vec<Option<&str>>>())
            .bind(audits.iter().map(|a| a.and_then(|a| a.2)).collect::<Vec<Option<&str>>>())
            .bind(audits.iter().map(|a| a.map(|a| a.3)).collect::<Vec<Option<&str>>>())
            .bind(audits.iter().map(|a| a.map(|a| a.4)).collect::<Vec<Option<&str>>>())
            .bind(audits.iter().map(|a| a.and_then(|a| a.5)).collect::<Vec<Option<&str>>>())
            .bind(audits.iter().map(|a| a.and_then(|a| a.6)).collect::<Vec<Option<&str>>>())
            .bind(audits.iter().map(|a| a.map(|a| a.7)).collect::<Vec<Option<&str>>>())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The generated function runs exactly the guard's update, with each parameter in place.
    #[test]
    fn the_group_function_is_the_guard_over_arrays() {
        let group = &*POSTGRES_GROUP;
        assert!(group.name.starts_with("icegate_swap_group_"));
        assert!(group.create.contains(
            "UPDATE tabulars SET metadata_location = p_metadata_location[i], metadata = p_document[i], \
             metadata_gzip = p_gzip[i], location = p_location[i], updated_at = p_now WHERE id = p_id[i] \
             AND metadata_location = p_expected[i] AND name = p_name[i] AND namespace_id = (SELECT n.id \
             FROM namespaces n WHERE n.warehouse_id = p_warehouse_id[i] AND n.name = p_namespace[i])"
        ));
        assert!(
            group
                .create
                .contains("(p_token TEXT, p_now BIGINT, p_metadata_location TEXT[], p_document TEXT[], p_gzip BYTEA[]")
        );
        let create = group.create_in("ice\"berg");
        assert!(create.contains("SET search_path = \"ice\"\"berg\", pg_temp\n"), "{create}");
        assert!(!create.replace("$icegate$", "").contains('$'), "every placeholder was replaced");
    }

    /// SQLite numbers `$n` parameters in order of first appearance, PostgreSQL by `n`: every
    /// statement names them in ascending order, so both bind the same values.
    #[test]
    fn every_statement_names_its_parameters_in_order() {
        for statement in std::iter::once(&GUARD).chain(APPLIED) {
            let mut seen = Vec::new();
            let sql = statement.sql.as_bytes();
            let mut i = 0;
            while i < sql.len() {
                if sql[i] == b'$' {
                    let digits: String =
                        sql[i + 1..].iter().take_while(|c| c.is_ascii_digit()).map(|&c| c as char).collect();
                    let n: usize = digits.parse().unwrap();
                    if !seen.contains(&n) {
                        assert_eq!(n, seen.len() + 1, "{}: ${n} appears before ${}", statement.sql, seen.len() + 1);
                        seen.push(n);
                    }
                    i += digits.len();
                }
                i += 1;
            }
            assert_eq!(seen.len(), statement.params.len(), "{}", statement.sql);
        }
    }
}
