//! Hive-style partition directories (`dt=2026-11-01/region=eu/part-0001.parquet`): the values a
//! file's path gives, and the Iceberg type of each partition column across a dataset.
//!
//! Keys and values are percent-decoded as Hive escapes them; `__HIVE_DEFAULT_PARTITION__` is
//! null. Every file of a dataset must name the same keys in the same order (a file that does not
//! is named, not guessed at). A column's type is `date` when every non-null value is a valid
//! `YYYY-MM-DD`, `long` when every one is a 64-bit integer, else `string`.

use std::fmt;

/// Hive's spelling of a null partition value.
pub const DEFAULT_PARTITION: &str = "__HIVE_DEFAULT_PARTITION__";

/// The partition values one file's path gives, in path order (`None`: null).
pub type PathValues = Vec<(String, Option<String>)>;

/// Why a path or a dataset's partitioning cannot be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused(pub String);

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

fn decode(part: &str, path: &str) -> Result<String, Refused> {
    percent_encoding::percent_decode_str(part)
        .decode_utf8()
        .map(|s| s.into_owned())
        .map_err(|_| Refused(format!("{path}: {part:?} is not UTF-8 once decoded")))
}

/// The partition values of `relative` (a file's path below the dataset's root, `/`-separated):
/// every directory must be `key=value`; the last segment is the file.
pub fn path_values(relative: &str) -> Result<PathValues, Refused> {
    let mut segments: Vec<&str> = relative.split('/').collect();
    segments.pop();
    let mut values = PathValues::with_capacity(segments.len());
    for segment in segments {
        let Some((key, value)) = segment.split_once('=') else {
            return Err(Refused(format!("{relative}: directory {segment:?} is not key=value")));
        };
        if key.is_empty() {
            return Err(Refused(format!("{relative}: directory {segment:?} has no key")));
        }
        let key = decode(key, relative)?;
        if values.iter().any(|(k, _)| *k == key) {
            return Err(Refused(format!("{relative}: partition key {key:?} appears twice")));
        }
        let value = (value != DEFAULT_PARTITION).then(|| decode(value, relative)).transpose()?;
        values.push((key, value));
    }
    Ok(values)
}

/// The Iceberg type of a partition column taken from paths.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColumnType {
    /// Days since 1970-01-01.
    Date,
    Long,
    String,
}

/// A typed partition value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    Date(i32),
    Long(i64),
    String(String),
}

/// Days since 1970-01-01 of a `YYYY-MM-DD` date (years 1-9999), `None` when it is not one.
pub fn date_days(text: &str) -> Option<i32> {
    let bytes = text.as_bytes();
    if bytes.len() != 10 || bytes[4] != b'-' || bytes[7] != b'-' {
        return None;
    }
    let digits = |range: std::ops::Range<usize>| -> Option<i64> {
        let part = &text[range];
        part.bytes().all(|b| b.is_ascii_digit()).then(|| part.parse().ok()).flatten()
    };
    let (year, month, day) = (digits(0..4)?, digits(5..7)?, digits(8..10)?);
    let leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    let days_in_month = match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if leap => 29,
        2 => 28,
        _ => return None,
    };
    if year < 1 || day < 1 || day > days_in_month {
        return None;
    }
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    i32::try_from(era * 146_097 + doe - 719_468).ok()
}

/// The type of a column whose values across the dataset are `values` (nulls included).
pub fn column_type<'a>(values: impl IntoIterator<Item = Option<&'a str>> + Clone) -> ColumnType {
    let present = || values.clone().into_iter().flatten();
    if present().next().is_none() {
        return ColumnType::String;
    }
    if present().all(|v| date_days(v).is_some()) {
        ColumnType::Date
    } else if present().all(|v| v.parse::<i64>().is_ok() && !v.starts_with('+')) {
        ColumnType::Long
    } else {
        ColumnType::String
    }
}

/// `value` as `kind` (the type [`column_type`] chose for its column).
pub fn typed(kind: ColumnType, value: &str) -> Option<Value> {
    match kind {
        ColumnType::Date => date_days(value).map(Value::Date),
        ColumnType::Long => value.parse().ok().map(Value::Long),
        ColumnType::String => Some(Value::String(value.to_owned())),
    }
}

/// A dataset's partitioning from its files' paths: the keys (the same for every file, in the
/// same order) and each key's type.
pub fn partitioning<'a>(
    files: impl IntoIterator<Item = (&'a str, &'a PathValues)> + Clone,
) -> Result<Vec<(String, ColumnType)>, Refused> {
    let mut iter = files.clone().into_iter();
    let Some((_, first)) = iter.next() else { return Ok(Vec::new()) };
    let keys: Vec<&String> = first.iter().map(|(k, _)| k).collect();
    for (path, values) in iter {
        if values.len() != keys.len() || values.iter().zip(&keys).any(|((k, _), key)| k != *key) {
            let theirs: Vec<&String> = values.iter().map(|(k, _)| k).collect();
            return Err(Refused(format!(
                "{path}: partition keys {theirs:?} differ from the dataset's {keys:?} (every file must have the same)"
            )));
        }
    }
    Ok(keys
        .iter()
        .enumerate()
        .map(|(i, key)| {
            let column: Vec<Option<&str>> =
                files.clone().into_iter().map(|(_, values)| values[i].1.as_deref()).collect();
            ((*key).clone(), column_type(column.iter().copied()))
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_give_decoded_values_and_nulls() {
        let values = path_values("dt=2026-11-01/region=e%3Du/part-0001.parquet").unwrap();
        assert_eq!(
            values,
            vec![("dt".to_owned(), Some("2026-11-01".to_owned())), ("region".to_owned(), Some("e=u".to_owned()))]
        );
        assert_eq!(path_values("k=__HIVE_DEFAULT_PARTITION__/f.parquet").unwrap(), vec![("k".to_owned(), None)]);
        assert_eq!(path_values("f.parquet").unwrap(), vec![]);
        assert_eq!(path_values("k=/f.parquet").unwrap(), vec![("k".to_owned(), Some(String::new()))]);
        for bad in ["notkv/f.parquet", "=v/f.parquet", "k=1/k=2/f.parquet", "k=%ff/f.parquet"] {
            assert!(path_values(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn dates_are_checked_and_counted_from_the_epoch() {
        assert_eq!(date_days("1970-01-01"), Some(0));
        assert_eq!(date_days("1970-01-02"), Some(1));
        assert_eq!(date_days("1969-12-31"), Some(-1));
        assert_eq!(date_days("2000-02-29"), Some(11_016));
        assert_eq!(date_days("2026-11-01"), Some(20_758));
        for bad in [
            "2026-02-29",
            "1900-02-29",
            "2026-13-01",
            "2026-00-10",
            "2026-1-01",
            "20261101",
            "0000-01-01",
            "2026-11-0a",
        ] {
            assert_eq!(date_days(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_columns_type_fits_every_value() {
        assert_eq!(column_type([Some("2026-11-01"), None, Some("2026-11-02")]), ColumnType::Date);
        assert_eq!(column_type([Some("1"), Some("-20"), None]), ColumnType::Long);
        assert_eq!(column_type([Some("1"), Some("2026-11-01")]), ColumnType::String);
        assert_eq!(column_type([Some("+1")]), ColumnType::String);
        assert_eq!(column_type([Some("99999999999999999999")]), ColumnType::String, "beyond a long");
        assert_eq!(column_type([None, None]), ColumnType::String);
        assert_eq!(typed(ColumnType::Date, "1970-01-03"), Some(Value::Date(2)));
        assert_eq!(typed(ColumnType::Long, "-7"), Some(Value::Long(-7)));
    }

    #[test]
    fn every_file_names_the_same_keys() {
        let a = path_values("dt=2026-11-01/n=1/a.parquet").unwrap();
        let b = path_values("dt=2026-11-02/n=__HIVE_DEFAULT_PARTITION__/b.parquet").unwrap();
        let files = [("a", &a), ("b", &b)];
        assert_eq!(
            partitioning(files).unwrap(),
            vec![("dt".to_owned(), ColumnType::Date), ("n".to_owned(), ColumnType::Long)]
        );
        let c = path_values("n=1/dt=2026-11-01/c.parquet").unwrap();
        let refused = partitioning([("a", &a), ("c", &c)]).unwrap_err();
        assert!(refused.0.starts_with("c: partition keys"), "{refused}");
        let d = path_values("dt=2026-11-01/d.parquet").unwrap();
        assert!(partitioning([("a", &a), ("d", &d)]).is_err());
    }
}
