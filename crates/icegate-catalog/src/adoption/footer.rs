//! Parquet footers: read with ranged reads from the end of a file (never its data), decoded,
//! and summarised as what a manifest entry needs: the record count, the file's columns (name
//! and Arrow type, as Parquet describes them) and per top-level column its size, value and null
//! counts and exact bounds.
//!
//! A footer is bounded (`max_footer_bytes`) before it is read; a file that is not Parquet, is
//! truncated, is encrypted or whose footer does not decode is skipped with the reason, never
//! failing the run.

use std::collections::HashMap;

use arrow_schema::{DataType, Field, TimeUnit};
use iceberg::spec::Datum;
use parquet::file::metadata::ParquetMetaDataReader;
use parquet::file::statistics::Statistics;

use crate::files::{FileIo, ListedFile};
use crate::store::Warehouse;
use crate::{CatalogError, Result};

/// `PAR1`: the first and last four bytes of a Parquet file.
const MAGIC: &[u8; 4] = b"PAR1";
/// The first read from a file's end: most footers fit, so most files take one request.
const FIRST_READ: u64 = 64 * 1024;

/// What one file's footer says.
#[derive(Debug, Clone)]
pub struct Footer {
    pub record_count: u64,
    /// Top-level columns, as Parquet describes them (no embedded Arrow schema is trusted).
    pub fields: Vec<Field>,
    /// Whether the file carries Iceberg (Parquet) field ids.
    pub has_field_ids: bool,
    /// Per top-level primitive column, by name.
    pub columns: HashMap<String, ColumnStats>,
    /// Row group offsets (for split planning).
    pub split_offsets: Vec<i64>,
}

/// One column's statistics across a file's row groups.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ColumnStats {
    pub size: u64,
    pub values: u64,
    /// `None` when a row group did not say.
    pub nulls: Option<u64>,
    /// Exact bounds of the file's own type (`None`: some row group lacked them).
    pub lower: Option<Datum>,
    pub upper: Option<Datum>,
}

/// Why a file is not adopted: said in the report beside its path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skip(pub String);

/// Reads and decodes `file`'s footer (a file below the source location `root`). `Ok(Err)`:
/// the file is skipped for the reason given; `Err`: storage failed (the run fails, and is
/// retried as a whole).
pub async fn read(
    files: &dyn FileIo,
    warehouse: &Warehouse,
    root: &str,
    file: &ListedFile,
    max_footer_bytes: u64,
) -> Result<std::result::Result<Footer, Skip>> {
    if file.size < 12 {
        return Ok(Err(Skip(format!("{} bytes: too short for a Parquet file", file.size))));
    }
    let mut tail = match files.read_source_tail(warehouse, root, file, FIRST_READ.min(file.size)).await {
        Ok(tail) => tail,
        Err(CatalogError::Conflict(why)) => return Ok(Err(Skip(why))),
        Err(CatalogError::BadRequest(why)) => return Ok(Err(Skip(why))),
        Err(other) => return Err(other),
    };
    let Some(last) = tail.len().checked_sub(8).map(|at| &tail[at..]) else {
        return Ok(Err(Skip("the file is shorter than it was listed".into())));
    };
    if &last[4..] == b"PARE" {
        return Ok(Err(Skip("an encrypted Parquet file (encrypted footer): not adopted".into())));
    }
    if &last[4..] != MAGIC {
        return Ok(Err(Skip("not a Parquet file (no PAR1 at its end)".into())));
    }
    let length = u64::from(u32::from_le_bytes([last[0], last[1], last[2], last[3]]));
    if length + 12 > file.size {
        return Ok(Err(Skip(format!("a footer of {length} bytes in a file of {}: truncated or corrupt", file.size))));
    }
    if length > max_footer_bytes {
        return Ok(Err(Skip(format!(
            "a footer of {length} bytes, over the limit of {max_footer_bytes} (adoption.max_footer_bytes)"
        ))));
    }
    if length + 8 > tail.len() as u64 {
        tail = match files.read_source_tail(warehouse, root, file, length + 8).await {
            Ok(tail) if tail.len() as u64 >= length + 8 => tail,
            Ok(_) => return Ok(Err(Skip("the file is shorter than it was listed".into()))),
            Err(CatalogError::Conflict(why) | CatalogError::BadRequest(why)) => return Ok(Err(Skip(why))),
            Err(other) => return Err(other),
        };
    }
    let end = tail.len() - 8;
    let start = end - length as usize;
    let metadata = match ParquetMetaDataReader::decode_metadata(&tail[start..end]) {
        Ok(metadata) => metadata,
        Err(e) => return Ok(Err(Skip(format!("the Parquet footer does not decode: {e}")))),
    };
    Ok(summarise(&metadata))
}

fn summarise(metadata: &parquet::file::metadata::ParquetMetaData) -> std::result::Result<Footer, Skip> {
    let file_metadata = metadata.file_metadata();
    let record_count = u64::try_from(file_metadata.num_rows())
        .map_err(|_| Skip(format!("a negative row count ({})", file_metadata.num_rows())))?;
    let arrow = parquet::arrow::parquet_to_arrow_schema(file_metadata.schema_descr(), None)
        .map_err(|e| Skip(format!("its schema has no Arrow form: {e}")))?;
    let has_field_ids =
        file_metadata.schema_descr().root_schema().get_fields().iter().any(|f| f.get_basic_info().has_id());
    let fields: Vec<Field> = arrow.fields().iter().map(|f| f.as_ref().clone()).collect();
    let types: HashMap<&str, &DataType> = fields.iter().map(|f| (f.name().as_str(), f.data_type())).collect();
    let mut columns: HashMap<String, ColumnStats> = HashMap::new();
    let mut complete: HashMap<String, (bool, bool)> = HashMap::new();
    for group in metadata.row_groups() {
        for column in group.columns() {
            let path = column.column_descr().path().parts();
            // Top-level primitive columns only: nested ones are read by name all the same.
            let [name] = path else { continue };
            let Some(data_type) = types.get(name.as_str()) else { continue };
            let stats = columns.entry(name.clone()).or_default();
            let seen = complete.entry(name.clone()).or_insert((true, true));
            stats.size += u64::try_from(column.compressed_size()).unwrap_or(0);
            stats.values += u64::try_from(column.num_values()).unwrap_or(0);
            let Some(statistics) = column.statistics() else {
                stats.nulls = None;
                *seen = (false, false);
                continue;
            };
            stats.nulls = match (stats.nulls, statistics.null_count_opt()) {
                (Some(sum), Some(n)) => Some(sum + n),
                (None, Some(n)) if seen.0 => Some(n),
                _ => None,
            };
            let (lower, upper) = bounds(data_type, statistics);
            if seen.0 {
                match lower {
                    Some(d) => stats.lower = Some(min(stats.lower.take(), d)),
                    None => {
                        stats.lower = None;
                        seen.0 = false;
                    }
                }
            }
            if seen.1 {
                match upper {
                    Some(d) => stats.upper = Some(max(stats.upper.take(), d)),
                    None => {
                        stats.upper = None;
                        seen.1 = false;
                    }
                }
            }
        }
    }
    // A column with only null values has no bounds, and that is exact: keep the counts.
    let split_offsets = metadata.row_groups().iter().filter_map(|g| g.file_offset()).collect();
    Ok(Footer { record_count, fields, has_field_ids, columns, split_offsets })
}

fn min(current: Option<Datum>, next: Datum) -> Datum {
    match current {
        Some(c) if c <= next => c,
        _ => next,
    }
}

fn max(current: Option<Datum>, next: Datum) -> Datum {
    match current {
        Some(c) if c >= next => c,
        _ => next,
    }
}

/// A row group's exact bounds as values of the column's type; `None` for either when it is not
/// exact, absent, NaN, or of a type whose bounds are not kept here.
fn bounds(data_type: &DataType, statistics: &Statistics) -> (Option<Datum>, Option<Datum>) {
    let exact = (statistics.min_is_exact(), statistics.max_is_exact());
    let pair = |lo: Option<Datum>, hi: Option<Datum>| (lo.filter(|_| exact.0), hi.filter(|_| exact.1));
    match (data_type, statistics) {
        (DataType::Boolean, Statistics::Boolean(s)) => {
            pair(s.min_opt().map(|v| Datum::bool(*v)), s.max_opt().map(|v| Datum::bool(*v)))
        }
        (DataType::Int32 | DataType::Int16 | DataType::Int8, Statistics::Int32(s)) => {
            pair(s.min_opt().map(|v| Datum::int(*v)), s.max_opt().map(|v| Datum::int(*v)))
        }
        (DataType::Date32, Statistics::Int32(s)) => {
            pair(s.min_opt().map(|v| Datum::date(*v)), s.max_opt().map(|v| Datum::date(*v)))
        }
        (DataType::Int64, Statistics::Int64(s)) => {
            pair(s.min_opt().map(|v| Datum::long(*v)), s.max_opt().map(|v| Datum::long(*v)))
        }
        (DataType::Timestamp(TimeUnit::Microsecond, tz), Statistics::Int64(s)) => {
            let datum =
                |v: &i64| if tz.is_some() { Datum::timestamptz_micros(*v) } else { Datum::timestamp_micros(*v) };
            pair(s.min_opt().map(datum), s.max_opt().map(datum))
        }
        (DataType::Float32, Statistics::Float(s)) => pair(
            s.min_opt().filter(|v| !v.is_nan()).map(|v| Datum::float(*v)),
            s.max_opt().filter(|v| !v.is_nan()).map(|v| Datum::float(*v)),
        ),
        (DataType::Float64, Statistics::Double(s)) => pair(
            s.min_opt().filter(|v| !v.is_nan()).map(|v| Datum::double(*v)),
            s.max_opt().filter(|v| !v.is_nan()).map(|v| Datum::double(*v)),
        ),
        (DataType::Utf8 | DataType::LargeUtf8, Statistics::ByteArray(s)) => pair(
            s.min_opt().and_then(|v| std::str::from_utf8(v.data()).ok()).map(Datum::string),
            s.max_opt().and_then(|v| std::str::from_utf8(v.data()).ok()).map(Datum::string),
        ),
        _ => (None, None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_are_kept_only_when_exact_and_of_their_type() {
        let ints = Statistics::int32(Some(3), Some(9), None, Some(0), false);
        assert_eq!(bounds(&DataType::Int32, &ints), (Some(Datum::int(3)), Some(Datum::int(9))));
        assert_eq!(bounds(&DataType::Date32, &ints), (Some(Datum::date(3)), Some(Datum::date(9))));
        // A type mismatch (a column the footer says is a string, with integer statistics) is no bound.
        assert_eq!(bounds(&DataType::Utf8, &ints), (None, None));
        let nan = Statistics::double(Some(f64::NAN), Some(2.0), None, Some(0), false);
        assert_eq!(bounds(&DataType::Float64, &nan), (None, Some(Datum::double(2.0))));
    }
}
