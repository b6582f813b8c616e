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

/// The most levels of nesting a file's schema may have (the root is one).
const MAX_SCHEMA_DEPTH: usize = 64;
/// The most schema elements (columns and groups) a file may have.
const MAX_SCHEMA_ELEMENTS: usize = 10_000;
/// How deep a Thrift value is skipped at most (Parquet's own reader stops at 64 too).
const MAX_SKIP_DEPTH: u8 = 64;

/// Thrift compact protocol, read only as far as a footer's schema: no recursion deeper than
/// `MAX_SKIP_DEPTH`, and every step consumes input, so the work is bounded by the footer's size.
struct Compact<'a> {
    buf: &'a [u8],
    at: usize,
}

impl Compact<'_> {
    fn byte(&mut self) -> Option<u8> {
        let b = *self.buf.get(self.at)?;
        self.at += 1;
        Some(b)
    }

    fn varint(&mut self) -> Option<u64> {
        let mut value = 0u64;
        for shift in (0..70).step_by(7) {
            let b = self.byte()?;
            value |= u64::from(b & 0x7f).checked_shl(shift)?;
            if b & 0x80 == 0 {
                return Some(value);
            }
        }
        None
    }

    fn zigzag(&mut self) -> Option<i64> {
        let v = self.varint()?;
        Some(((v >> 1) as i64) ^ -((v & 1) as i64))
    }

    fn advance(&mut self, n: u64) -> Option<()> {
        let n = usize::try_from(n).ok()?;
        (self.buf.len() - self.at >= n).then(|| self.at += n)
    }

    /// A field header: `None` at the struct's end; its id (absolute) and type.
    fn field(&mut self, last: &mut i64) -> Option<Option<(i64, u8)>> {
        let header = self.byte()?;
        if header == 0 {
            return Some(None);
        }
        let delta = i64::from(header >> 4);
        *last = if delta == 0 { self.zigzag()? } else { *last + delta };
        Some(Some((*last, header & 0x0f)))
    }

    fn list_header(&mut self) -> Option<(u64, u8)> {
        let header = self.byte()?;
        let size = match header >> 4 {
            15 => self.varint()?,
            small => u64::from(small),
        };
        Some((size, header & 0x0f))
    }

    fn skip(&mut self, kind: u8, depth: u8) -> Option<()> {
        let depth = depth.checked_sub(1)?;
        match kind {
            1 | 2 => Some(()),
            3 => self.advance(1),
            4..=6 => self.varint().map(|_| ()),
            7 => self.advance(8),
            8 => {
                let n = self.varint()?;
                self.advance(n)
            }
            9 | 10 => {
                let (size, elem) = self.list_header()?;
                for _ in 0..size {
                    match elem {
                        // Booleans in a list take a byte each.
                        1 | 2 => self.advance(1)?,
                        other => self.skip(other, depth)?,
                    }
                }
                Some(())
            }
            11 => {
                let size = self.varint()?;
                if size == 0 {
                    return Some(());
                }
                let kinds = self.byte()?;
                for _ in 0..size {
                    for kind in [kinds >> 4, kinds & 0x0f] {
                        match kind {
                            1 | 2 => self.advance(1)?,
                            other => self.skip(other, depth)?,
                        }
                    }
                }
                Some(())
            }
            12 => {
                let mut last = 0;
                while let Some((_, kind)) = self.field(&mut last)? {
                    self.skip(kind, depth)?;
                }
                Some(())
            }
            _ => None,
        }
    }
}

/// How many elements a footer's schema has and how deep it nests, read from the Thrift of
/// `FileMetaData` without building anything.
fn schema_shape(footer: &[u8]) -> std::result::Result<(usize, usize), String> {
    let bad = || "malformed Thrift".to_owned();
    let mut reader = Compact { buf: footer, at: 0 };
    let mut last = 0;
    let children: Vec<i64> = loop {
        let Some((id, kind)) = reader.field(&mut last).ok_or_else(bad)? else {
            return Err("no schema".into());
        };
        if id != 2 || kind != 9 {
            reader.skip(kind, MAX_SKIP_DEPTH).ok_or_else(bad)?;
            continue;
        }
        let (size, elem) = reader.list_header().ok_or_else(bad)?;
        if elem != 12 {
            return Err(bad());
        }
        let mut children = Vec::new();
        for _ in 0..size {
            if children.len() > MAX_SCHEMA_ELEMENTS {
                break;
            }
            let (mut last, mut count) = (0, 0);
            while let Some((id, kind)) = reader.field(&mut last).ok_or_else(bad)? {
                if id == 5 && kind == 5 {
                    count = reader.zigzag().ok_or_else(bad)?;
                } else {
                    reader.skip(kind, MAX_SKIP_DEPTH).ok_or_else(bad)?;
                }
            }
            children.push(count);
        }
        break children;
    };
    // The elements are the tree in depth-first order, each group followed by its children.
    let (mut open, mut depth): (Vec<i64>, usize) = (Vec::new(), 0);
    for count in &children {
        if let Some(remaining) = open.last_mut() {
            *remaining -= 1;
        }
        if *count > 0 {
            open.push(*count);
            depth = depth.max(open.len());
        }
        while open.last().is_some_and(|r| *r <= 0) {
            open.pop();
        }
    }
    Ok((children.len(), depth))
}

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
    // Decoding takes CPU in proportion to the footer (up to `max_footer_bytes`): off the async
    // workers, so a run over wide files never stalls the server's requests.
    let footer = tail.slice(tail.len() - 8 - length as usize..tail.len() - 8);
    tokio::task::spawn_blocking(move || decode(&footer))
        .await
        .map_err(|e| CatalogError::Internal(anyhow::anyhow!("decoding a Parquet footer: {e}")))
}

/// Decodes a footer (the Thrift between the data and the footer's length) and summarises it.
fn decode(footer: &[u8]) -> std::result::Result<Footer, Skip> {
    // The schema's shape first, without recursion: decoding builds its tree recursively, and
    // a footer nesting thousands of levels would take the thread's stack.
    match schema_shape(footer) {
        Ok((elements, depth)) if elements <= MAX_SCHEMA_ELEMENTS && depth <= MAX_SCHEMA_DEPTH => {}
        Ok((elements, depth)) => {
            return Err(Skip(format!(
                "a schema of {elements} elements nested {depth} levels deep (at most {MAX_SCHEMA_ELEMENTS} \
                 elements, {MAX_SCHEMA_DEPTH} levels)"
            )));
        }
        Err(why) => return Err(Skip(format!("the Parquet footer does not decode: {why}"))),
    }
    let metadata = ParquetMetaDataReader::decode_metadata(footer)
        .map_err(|e| Skip(format!("the Parquet footer does not decode: {e}")))?;
    summarise(&metadata)
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

    fn footer_of(table: &arrow_schema::Schema) -> Vec<u8> {
        let descriptor = parquet::arrow::ArrowSchemaConverter::new().convert(table).unwrap();
        let mut buffer = Vec::new();
        let props = std::sync::Arc::new(parquet::file::properties::WriterProperties::builder().build());
        let writer =
            parquet::file::writer::SerializedFileWriter::new(&mut buffer, descriptor.root_schema_ptr(), props).unwrap();
        writer.close().unwrap();
        let length = u32::from_le_bytes(buffer[buffer.len() - 8..buffer.len() - 4].try_into().unwrap()) as usize;
        buffer[buffer.len() - 8 - length..buffer.len() - 8].to_vec()
    }

    #[test]
    fn the_schema_shape_is_read_without_building_it() {
        use arrow_schema::{Field, Schema};
        let flat = Schema::new(vec![Field::new("a", DataType::Int64, true), Field::new("b", DataType::Utf8, true)]);
        assert_eq!(schema_shape(&footer_of(&flat)).unwrap(), (3, 1));
        // Structs inside structs: one more level each.
        let mut field = Field::new("leaf", DataType::Int32, true);
        for i in 0..10 {
            field = Field::new(format!("s{i}"), DataType::Struct(vec![field].into()), true);
        }
        let nested = Schema::new(vec![field]);
        assert_eq!(schema_shape(&footer_of(&nested)).unwrap(), (12, 11));
        // Truncated or garbage input is refused, never a panic.
        let bytes = footer_of(&nested);
        for cut in 0..bytes.len() {
            let _ = schema_shape(&bytes[..cut]);
        }
        assert!(schema_shape(&[0xff; 64]).is_err());
    }

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
