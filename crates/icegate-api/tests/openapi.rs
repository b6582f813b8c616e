//! The generated OpenAPI documents: committed copies stay current, and the Iceberg REST surface
//! icegate implements agrees with the upstream specification.

use std::collections::BTreeSet;
use std::path::PathBuf;

use serde_json::Value;

fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap()
}

#[test]
fn committed_openapi_documents_are_current() {
    let documents = icegate_api::openapi::documents();
    let dir = workspace_root().join("openapi");
    let update = std::env::var_os("ICEGATE_UPDATE_OPENAPI").is_some();
    for (file, generated) in
        [("iceberg-rest.yaml", documents.iceberg_rest_yaml()), ("management.yaml", documents.management_yaml())]
    {
        let path = dir.join(file);
        if update {
            std::fs::write(&path, &generated).unwrap();
            continue;
        }
        let committed = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            committed == generated,
            "{} is out of date with the code. Regenerate it with `cargo run -p icegate -- openapi` \
             (or ICEGATE_UPDATE_OPENAPI=1 cargo test -p icegate-api --test openapi) and commit the result.",
            path.display()
        );
    }
}

/// YAML (whose mapping keys may be numbers, like status codes) as JSON with string keys.
fn yaml_to_json(value: yaml_serde::Value) -> Value {
    use yaml_serde::Value as Y;
    match value {
        Y::Null => Value::Null,
        Y::Bool(b) => Value::Bool(b),
        Y::Number(n) => serde_json::to_value(&n).unwrap_or(Value::Null),
        Y::String(s) => Value::String(s),
        Y::Sequence(items) => Value::Array(items.into_iter().map(yaml_to_json).collect()),
        Y::Mapping(map) => Value::Object(
            map.into_iter()
                .map(|(k, v)| {
                    let key = match k {
                        Y::String(s) => s,
                        other => yaml_serde::to_string(&other).unwrap().trim().to_owned(),
                    };
                    (key, yaml_to_json(v))
                })
                .collect(),
        ),
        Y::Tagged(tagged) => yaml_to_json(tagged.value),
    }
}

/// The upstream release spec: ICEGATE_ICEBERG_SPEC, or the copy kept in `openapi/upstream/`.
fn upstream_spec() -> Value {
    let path = std::env::var_os("ICEGATE_ICEBERG_SPEC")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("openapi/upstream/rest-catalog-open-api-1.11.0.yaml"));
    read_spec(path)
}

/// The upstream spec after the release (operations clients have started to use, such as
/// unregisterTable): ICEGATE_ICEBERG_SPEC_MAIN, or the copy kept in `openapi/upstream/`.
fn upstream_main_spec() -> Value {
    let path = std::env::var_os("ICEGATE_ICEBERG_SPEC_MAIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("openapi/upstream/rest-catalog-open-api-main-2026-08.yaml"));
    read_spec(path)
}

fn read_spec(path: PathBuf) -> Value {
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("the upstream Iceberg REST spec {} cannot be read: {e}", path.display()));
    yaml_to_json(yaml_serde::from_str(&text).expect("the upstream spec parses"))
}

/// Follows a local `$ref` (`#/components/...`) once.
fn resolve<'a>(spec: &'a Value, value: &'a Value) -> &'a Value {
    match value.get("$ref").and_then(Value::as_str) {
        Some(reference) => {
            let pointer = reference.trim_start_matches('#');
            spec.pointer(pointer).unwrap_or_else(|| panic!("dangling $ref {reference}"))
        }
        None => value,
    }
}

fn schema_name(reference: &Value) -> Option<String> {
    reference.get("$ref")?.as_str()?.rsplit('/').next().map(str::to_owned)
}

/// The JSON schema name of a request body or response, following `$ref`s.
fn body_schema(spec: &Value, body: &Value) -> Option<String> {
    let body = resolve(spec, body);
    schema_name(body.pointer("/content/application~1json/schema")?)
}

fn parameter_names(spec: &Value, parameters: Option<&Value>) -> BTreeSet<String> {
    parameters
        .and_then(Value::as_array)
        .map(|ps| ps.iter().filter_map(|p| resolve(spec, p)["name"].as_str().map(str::to_owned)).collect())
        .unwrap_or_default()
}

/// Statuses icegate documents beyond the spec, each with the reason. Keep this list short.
const DOCUMENTED_EXTENSIONS: &[(&str, &str, &str)] = &[
    (
        "POST /v1/{prefix}/namespaces",
        "404",
        "the parent of a nested namespace (or the warehouse) does not exist: NoSuchNamespaceException, \
         which is what the Java client's namespace error handler maps 404 to",
    ),
    (
        "POST /v1/{prefix}/namespaces/{namespace}/tables/{table}/sign",
        "404",
        "the table does not exist (NoSuchTableException), as for every other table route; the spec \
         lists no 404 for signing",
    ),
];

/// Newer-spec operations icegate implements: each is compared with upstream main, everything
/// else with the release.
const FROM_MAIN: &[&str] = &["POST /v1/{prefix}/namespaces/{namespace}/tables/{table}/unregister"];

#[test]
fn implemented_rest_surface_agrees_with_the_upstream_spec() {
    let release = upstream_spec();
    let main = upstream_main_spec();
    let ours = serde_json::to_value(&icegate_api::openapi::documents().iceberg_rest).unwrap();
    let mut problems = Vec::new();
    let mut checked = 0;
    let mut checked_against_main = 0;
    let mut compared_bodies = 0;
    for (path, item) in ours["paths"].as_object().unwrap() {
        for (method, operation) in item.as_object().unwrap() {
            let at = format!("{} {path}", method.to_uppercase());
            let newer = FROM_MAIN.contains(&at.as_str());
            let upstream = if newer { &main } else { &release };
            let Some(theirs_item) = upstream["paths"].get(path) else {
                problems.push(format!("{at}: not in the upstream spec"));
                continue;
            };
            let path_params = parameter_names(upstream, theirs_item.get("parameters"));
            let Some(theirs) = theirs_item.get(method) else {
                problems.push(format!("{at}: not in the upstream spec"));
                continue;
            };
            checked += 1;
            checked_against_main += usize::from(newer);
            if operation["operationId"] != theirs["operationId"] {
                problems.push(format!(
                    "{at}: operationId {} != upstream {}",
                    operation["operationId"], theirs["operationId"]
                ));
            }
            // Status codes: ours must be a subset of what the spec allows.
            let allowed: BTreeSet<&String> = theirs["responses"].as_object().unwrap().keys().collect();
            for (status, response) in operation["responses"].as_object().unwrap() {
                let extension = DOCUMENTED_EXTENSIONS.iter().any(|(op, code, _)| *op == at && code == status);
                if !allowed.contains(status) && !extension {
                    problems.push(format!("{at}: status {status} is not in the spec ({allowed:?})"));
                    continue;
                }
                if extension {
                    continue;
                }
                let ours_schema = body_schema(&ours, response);
                let mut theirs_schema = body_schema(upstream, &theirs["responses"][status]);
                // Some view operations declare their errors as a bare `ErrorModel`, unlike every
                // other error response; servers (the Java reference included) send the
                // `IcebergErrorResponse` envelope there too, and so does icegate.
                if theirs_schema.as_deref() == Some("ErrorModel")
                    && ours_schema.as_deref() == Some("IcebergErrorResponse")
                {
                    theirs_schema = ours_schema.clone();
                }
                compared_bodies += usize::from(ours_schema.is_some());
                if ours_schema != theirs_schema {
                    problems.push(format!("{at} {status}: body schema {ours_schema:?} != upstream {theirs_schema:?}"));
                }
            }
            // Request body schema.
            if let Some(body) = operation.get("requestBody") {
                let ours_schema = body_schema(&ours, body);
                let theirs_schema = theirs.get("requestBody").and_then(|b| body_schema(upstream, b));
                if ours_schema != theirs_schema {
                    problems.push(format!("{at}: request schema {ours_schema:?} != upstream {theirs_schema:?}"));
                }
            }
            // Parameters: every one we accept exists upstream (on the operation or the path).
            let mut upstream_params = parameter_names(upstream, theirs.get("parameters"));
            upstream_params.extend(path_params.iter().cloned());
            for name in parameter_names(&ours, operation.get("parameters")) {
                if !upstream_params.contains(&name) {
                    problems.push(format!("{at}: parameter {name:?} is not in the spec ({upstream_params:?})"));
                }
            }
        }
    }
    // Every schema we define carries an upstream name (of the release or, for what newer
    // operations and fields use, of main), so clients' models line up.
    for name in ours["components"]["schemas"].as_object().unwrap().keys() {
        if release["components"]["schemas"].get(name).is_none() && main["components"]["schemas"].get(name).is_none() {
            problems.push(format!("schema {name} is not in the spec"));
        }
    }
    assert!(checked >= 6, "only {checked} operations were compared");
    assert_eq!(checked_against_main, FROM_MAIN.len(), "every newer operation is implemented and compared");
    assert!(compared_bodies >= 20, "only {compared_bodies} response bodies were compared");
    assert!(problems.is_empty(), "the implemented surface disagrees with the spec:\n  {}", problems.join("\n  "));
}
