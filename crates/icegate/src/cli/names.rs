//! Objects as operators name them: `warehouse.namespace.table`, nested namespaces dotted, a part
//! that holds a dot (or a quote) in double quotes, a quote inside doubled (`default."a.b".t`).

use super::client::{Failure, Outcome};

/// The parts of a dotted name.
pub fn parts(name: &str) -> Outcome<Vec<String>> {
    let mut parts = Vec::new();
    let mut current = String::new();
    let mut chars = name.chars().peekable();
    let mut quoted = false;
    let mut was_quoted = false;
    while let Some(c) = chars.next() {
        match (c, quoted) {
            ('"', false) if current.is_empty() && !was_quoted => {
                quoted = true;
                was_quoted = true;
            }
            ('"', true) if chars.peek() == Some(&'"') => {
                chars.next();
                current.push('"');
            }
            ('"', true) => quoted = false,
            ('.', false) => {
                if current.is_empty() && !was_quoted {
                    return Err(Failure(format!("{name:?} has an empty part")));
                }
                parts.push(std::mem::take(&mut current));
                was_quoted = false;
            }
            (c, _) if !quoted && was_quoted => {
                return Err(Failure(format!("{name:?}: {c:?} after a closing quote (quote the whole part)")));
            }
            (c, _) => current.push(c),
        }
    }
    if quoted {
        return Err(Failure(format!("{name:?} has an unclosed quote")));
    }
    if current.is_empty() && !was_quoted {
        return Err(Failure(format!("{name:?} has an empty part")));
    }
    parts.push(current);
    Ok(parts)
}

/// A part as it is written back (quoted when it must be).
pub fn show(part: &str) -> String {
    if part.contains(['.', '"']) || part.is_empty() {
        format!("\"{}\"", part.replace('"', "\"\""))
    } else {
        part.to_owned()
    }
}

pub fn joined(parts: &[String]) -> String {
    parts.iter().map(|p| show(p)).collect::<Vec<_>>().join(".")
}

/// `warehouse.namespace...`: the warehouse and the namespace's levels (at least one).
pub fn namespace(name: &str) -> Outcome<(String, Vec<String>)> {
    let mut parts = parts(name)?;
    if parts.len() < 2 {
        return Err(Failure(format!("{name:?} is not warehouse.namespace")));
    }
    let warehouse = parts.remove(0);
    Ok((warehouse, parts))
}

/// `warehouse.namespace....table`: the warehouse, the namespace's levels and the name.
pub fn table(name: &str) -> Outcome<(String, Vec<String>, String)> {
    let mut parts = parts(name)?;
    if parts.len() < 3 {
        return Err(Failure(format!("{name:?} is not warehouse.namespace.table")));
    }
    let warehouse = parts.remove(0);
    let table = parts.pop().unwrap_or_default();
    Ok((warehouse, parts, table))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dotted_names_with_quoted_parts_read_back_as_written() {
        assert_eq!(parts("default.sales.orders").unwrap(), ["default", "sales", "orders"]);
        assert_eq!(parts(r#"default."a.b".t"#).unwrap(), ["default", "a.b", "t"]);
        assert_eq!(parts(r#"w."say ""hi""".t"#).unwrap(), ["w", r#"say "hi""#, "t"]);
        assert_eq!(parts(r#"w."".t"#).unwrap(), ["w", "", "t"]);
        for bad in ["", "a..b", "a.", r#"a."b"c.d"#, r#"a."b"#, ".a"] {
            assert!(parts(bad).is_err(), "{bad}");
        }
        for name in ["default.sales.orders", r#"default."a.b".t"#, r#"w."say ""hi""".t"#] {
            assert_eq!(joined(&parts(name).unwrap()), name);
        }
        assert_eq!(table("w.a.b.t").unwrap(), ("w".into(), vec!["a".into(), "b".into()], "t".into()));
        assert!(table("w.t").is_err() && namespace("w").is_err());
    }
}
