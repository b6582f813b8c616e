//! `file://` warehouses: every file icegate writes, reads or deletes is reached from the
//! warehouse's root one directory at a time, never through a symbolic link.
//!
//! On a local file system a client that writes a table's files can also plant links in the
//! table's directory: a link named `metadata` pointing at another table, or a link inside the
//! table pointing at another warehouse or outside any. Followed, the catalog's next metadata
//! file would land there, and a purge would delete what the link points at. Here each directory
//! below the root is opened with `O_NOFOLLOW | O_DIRECTORY` relative to the one before (a link
//! anywhere on the path fails the operation), files are created with `O_EXCL | O_NOFOLLOW`, only
//! regular files are read (a FIFO would block a thread forever), and a purge walks without
//! following links and removes a link itself, never its target. Everything acts on open
//! directory handles, so a directory swapped for a link midway is not followed either.
//!
//! The root itself is the operator's (it may be a link); only what lies beneath it is guarded.

use std::io::{Read as _, Write as _};
use std::os::fd::OwnedFd;
use std::path::Path;

use rustix::fs::{AtFlags, Dir, FileType, Mode, OFlags};
use rustix::io::Errno;

fn errno(e: Errno) -> std::io::Error {
    std::io::Error::from_raw_os_error(e.raw_os_error())
}

/// The path's components below `root` (`location` lies inside it: the catalog checked).
fn components<'a>(root: &str, location: &'a str) -> std::io::Result<Vec<&'a str>> {
    let rest = location
        .strip_prefix(root.trim_end_matches('/'))
        .and_then(|rest| rest.strip_prefix('/'))
        .ok_or_else(|| std::io::Error::other("a location outside its warehouse"))?;
    let parts: Vec<&str> = rest.split('/').collect();
    if parts.iter().any(|p| p.is_empty() || *p == "." || *p == "..") {
        return Err(std::io::Error::other("a location with an empty, `.` or `..` segment"));
    }
    Ok(parts)
}

/// The directory `parts` below `root`, each step opened without following a link; with
/// `create`, missing directories are made. `Ok(None)` when one is missing and not created.
fn open_dir(root: &Path, parts: &[&str], create: bool) -> std::io::Result<Option<OwnedFd>> {
    let directory = OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC;
    let mut fd = rustix::fs::open(root, directory, Mode::empty()).map_err(errno)?;
    for part in parts {
        let beneath = OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::RDONLY | OFlags::CLOEXEC;
        fd = match rustix::fs::openat(&fd, *part, beneath, Mode::empty()) {
            Ok(next) => next,
            Err(Errno::NOENT) if create => {
                match rustix::fs::mkdirat(&fd, *part, Mode::from_raw_mode(0o755)) {
                    Ok(()) | Err(Errno::EXIST) => {}
                    Err(e) => return Err(errno(e)),
                }
                rustix::fs::openat(&fd, *part, beneath, Mode::empty()).map_err(errno)?
            }
            Err(Errno::NOENT) => return Ok(None),
            // A link (ELOOP with O_NOFOLLOW) or a file (ENOTDIR) where a directory should be.
            Err(e) => return Err(errno(e)),
        };
    }
    Ok(Some(fd))
}

fn split_root(root: &str) -> &Path {
    Path::new(root.strip_prefix("file://").unwrap_or(root))
}

/// Writes a new file at `location`, never over an existing one; with `sync` its data and its
/// directory entry reach the disk before this returns. A failed write removes what it wrote.
pub(crate) fn write_new(root: &str, location: &str, bytes: &[u8], sync: bool) -> std::io::Result<()> {
    let parts = components(root, location)?;
    let (name, parents) = parts.split_last().ok_or_else(|| std::io::Error::other("an empty location"))?;
    let dir = open_dir(split_root(root), parents, true)?.ok_or_else(|| std::io::Error::other("no directory"))?;
    let create = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let mut file =
        std::fs::File::from(rustix::fs::openat(&dir, *name, create, Mode::from_raw_mode(0o644)).map_err(errno)?);
    let written = file.write_all(bytes).and_then(|()| if sync { file.sync_data() } else { Ok(()) });
    if let Err(e) = written {
        let _ = rustix::fs::unlinkat(&dir, *name, AtFlags::empty());
        return Err(e);
    }
    if sync {
        rustix::fs::fsync(&dir).map_err(errno)?;
    }
    Ok(())
}

/// What reading a local file found.
pub(crate) enum Found {
    Bytes(Vec<u8>),
    Missing,
    TooLarge(u64),
    /// A link, a directory, a FIFO, a device: not a metadata file.
    NotAFile,
}

/// Reads the regular file at `location`, refusing one over `max_bytes` before reading it.
pub(crate) fn read(root: &str, location: &str, max_bytes: u64) -> std::io::Result<Found> {
    let parts = components(root, location)?;
    let (name, parents) = parts.split_last().ok_or_else(|| std::io::Error::other("an empty location"))?;
    let Some(dir) = open_dir(split_root(root), parents, false)? else { return Ok(Found::Missing) };
    // Non-blocking: opening a FIFO for reading would otherwise wait for a writer.
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
    let fd = match rustix::fs::openat(&dir, *name, flags, Mode::empty()) {
        Ok(fd) => fd,
        Err(Errno::NOENT) => return Ok(Found::Missing),
        Err(Errno::LOOP) => return Ok(Found::NotAFile),
        Err(e) => return Err(errno(e)),
    };
    let stat = rustix::fs::fstat(&fd).map_err(errno)?;
    if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile {
        return Ok(Found::NotAFile);
    }
    let size = stat.st_size as u64;
    if size > max_bytes {
        return Ok(Found::TooLarge(size));
    }
    let mut bytes = Vec::with_capacity(size as usize);
    std::fs::File::from(fd).take(max_bytes.saturating_add(1)).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > max_bytes {
        return Ok(Found::TooLarge(bytes.len() as u64));
    }
    Ok(Found::Bytes(bytes))
}

/// The last `bytes` bytes of the regular file at `location`, if its size and modification
/// time are still `(size, modified_ms)`: `Ok(None)` when it is missing or not a regular file,
/// `Err` of kind `Other` naming the change when it changed.
pub(crate) fn read_tail(
    root: &str,
    location: &str,
    (size, modified_ms): (u64, i64),
    bytes: u64,
) -> std::io::Result<Option<Vec<u8>>> {
    use std::io::Seek as _;
    let parts = components(root, location)?;
    let (name, parents) = parts.split_last().ok_or_else(|| std::io::Error::other("an empty location"))?;
    let Some(dir) = open_dir(split_root(root), parents, false)? else { return Ok(None) };
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
    let fd = match rustix::fs::openat(&dir, *name, flags, Mode::empty()) {
        Ok(fd) => fd,
        Err(Errno::NOENT | Errno::LOOP) => return Ok(None),
        Err(e) => return Err(errno(e)),
    };
    let stat = rustix::fs::fstat(&fd).map_err(errno)?;
    if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile {
        return Ok(None);
    }
    let modified = stat.st_mtime.saturating_mul(1000).saturating_add(stat.st_mtime_nsec as i64 / 1_000_000);
    if stat.st_size as u64 != size || modified != modified_ms {
        return Err(std::io::Error::new(std::io::ErrorKind::StaleNetworkFileHandle, "changed since it was listed"));
    }
    let take = bytes.min(size);
    let mut file = std::fs::File::from(fd);
    file.seek(std::io::SeekFrom::Start(size - take))?;
    let mut out = Vec::with_capacity(take as usize);
    file.take(take).read_to_end(&mut out)?;
    Ok(Some(out))
}

/// Deletes the file at `location` (a link there is removed itself); a missing one is no error.
pub(crate) fn delete(root: &str, location: &str) -> std::io::Result<()> {
    let parts = components(root, location)?;
    let (name, parents) = parts.split_last().ok_or_else(|| std::io::Error::other("an empty location"))?;
    let Some(dir) = open_dir(split_root(root), parents, false)? else { return Ok(()) };
    match rustix::fs::unlinkat(&dir, *name, AtFlags::empty()) {
        Ok(()) | Err(Errno::NOENT) => Ok(()),
        Err(e) => Err(errno(e)),
    }
}

/// Deletes up to `budget` files below the directory `location` without following links (a
/// link is removed, its target kept), the directories emptied on the way and, once nothing is
/// left, `location` itself; answers how many files and links went, their bytes, and whether
/// nothing is left.
pub(crate) fn delete_below(root: &str, location: &str, budget: usize) -> std::io::Result<(usize, u64, bool)> {
    let parts = components(root, location)?;
    let (name, parents) = parts.split_last().ok_or_else(|| std::io::Error::other("an empty location"))?;
    let Some(parent) = open_dir(split_root(root), parents, false)? else { return Ok((0, 0, true)) };
    let flags = OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::RDONLY | OFlags::CLOEXEC;
    let dir = match rustix::fs::openat(&parent, *name, flags, Mode::empty()) {
        Ok(dir) => dir,
        Err(Errno::NOENT) => return Ok((0, 0, true)),
        Err(e) => return Err(errno(e)),
    };
    let mut walk = Walk { budget, deleted: 0, bytes: 0 };
    if !walk.empty_dir(&dir)? {
        return Ok((walk.deleted, walk.bytes, false));
    }
    match rustix::fs::unlinkat(&parent, *name, AtFlags::REMOVEDIR) {
        // Something may have been written meanwhile: it stays, with its directory.
        Ok(()) | Err(Errno::NOENT) => Ok((walk.deleted, walk.bytes, true)),
        Err(Errno::NOTEMPTY) => Ok((walk.deleted, walk.bytes, false)),
        Err(e) => Err(errno(e)),
    }
}

struct Walk {
    budget: usize,
    deleted: usize,
    bytes: u64,
}

impl Walk {
    /// Empties `dir` within the budget; whether it is empty.
    fn empty_dir(&mut self, dir: &OwnedFd) -> std::io::Result<bool> {
        let mut names = Vec::new();
        for entry in Dir::read_from(dir).map_err(errno)? {
            let entry = entry.map_err(errno)?;
            let name = entry.file_name().to_bytes();
            if name != b"." && name != b".." {
                names.push(entry.file_name().to_owned());
            }
        }
        for name in names {
            if self.deleted >= self.budget {
                return Ok(false);
            }
            let stat = match rustix::fs::statat(dir, name.as_c_str(), AtFlags::SYMLINK_NOFOLLOW) {
                Ok(stat) => stat,
                Err(Errno::NOENT) => continue,
                Err(e) => return Err(errno(e)),
            };
            if FileType::from_raw_mode(stat.st_mode) == FileType::Directory {
                let flags = OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::RDONLY | OFlags::CLOEXEC;
                let sub = rustix::fs::openat(dir, name.as_c_str(), flags, Mode::empty()).map_err(errno)?;
                if !self.empty_dir(&sub)? {
                    return Ok(false);
                }
                match rustix::fs::unlinkat(dir, name.as_c_str(), AtFlags::REMOVEDIR) {
                    Ok(()) | Err(Errno::NOENT) => {}
                    Err(e) => return Err(errno(e)),
                }
            } else {
                match rustix::fs::unlinkat(dir, name.as_c_str(), AtFlags::empty()) {
                    Ok(()) => {
                        self.deleted += 1;
                        self.bytes += u64::try_from(stat.st_size).unwrap_or(0);
                    }
                    Err(Errno::NOENT) => {}
                    Err(e) => return Err(errno(e)),
                }
            }
        }
        Ok(true)
    }
}

/// A regular file found below a directory: its location, size and last-modified time (ms).
pub(crate) type ListedFile = (String, u64, i64);

/// Lists the regular files below the directory `location`, at most `max` of them (`true`: all),
/// without following links: a link, a FIFO or a socket is not listed (so never deleted as an
/// orphan), nor is a name that is not UTF-8 (no metadata can name it).
pub(crate) fn list_below(root: &str, location: &str, max: usize) -> std::io::Result<(Vec<ListedFile>, bool)> {
    let parts = components(root, location)?;
    let (name, parents) = parts.split_last().ok_or_else(|| std::io::Error::other("an empty location"))?;
    let Some(parent) = open_dir(split_root(root), parents, false)? else { return Ok((Vec::new(), true)) };
    let flags = OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::RDONLY | OFlags::CLOEXEC;
    let dir = match rustix::fs::openat(&parent, *name, flags, Mode::empty()) {
        Ok(dir) => dir,
        Err(Errno::NOENT) => return Ok((Vec::new(), true)),
        Err(e) => return Err(errno(e)),
    };
    walk(dir, location, max)
}

/// [`list_below`] of a source location: `location` is `root` itself or lies below it (the root,
/// an operator's registered source, may be reached through a link; nothing below it is).
pub(crate) fn list_source(root: &str, location: &str, max: usize) -> std::io::Result<(Vec<ListedFile>, bool)> {
    if location.trim_end_matches('/') != root.trim_end_matches('/') {
        return list_below(root, location, max);
    }
    let directory = OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC;
    let dir = match rustix::fs::open(split_root(root), directory, Mode::empty()) {
        Ok(dir) => dir,
        Err(Errno::NOENT) => return Ok((Vec::new(), true)),
        Err(e) => return Err(errno(e)),
    };
    walk(dir, location, max)
}

/// Directories deeper than this below a listed location are not descended into (the listing is
/// then incomplete): each level holds one open descriptor while its subdirectories are walked.
const MAX_WALK_DEPTH: usize = 128;

/// The regular files below the open directory `dir` (named `location`), at most `max`, in at
/// most `max` directories (a tree of empty directories is bounded like one of files). Depth
/// first, so open descriptors are bounded by the depth, never by how many directories wait.
fn walk(dir: OwnedFd, location: &str, max: usize) -> std::io::Result<(Vec<ListedFile>, bool)> {
    let flags = OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::RDONLY | OFlags::CLOEXEC;
    let mut found = Vec::new();
    let mut seen = 0usize;
    let mut complete = true;
    // Each level: its directory, its name, and the subdirectories still to walk.
    let mut stack: Vec<(OwnedFd, String, Vec<std::ffi::CString>)> = Vec::new();
    let root_name = location.trim_end_matches('/').to_owned();
    let subdirs = read_level(&dir, &root_name, (&mut found, &mut seen), max)?;
    let Some(subdirs) = subdirs else { return Ok((found, false)) };
    stack.push((dir, root_name, subdirs));
    loop {
        let depth = stack.len();
        let Some((dir, prefix, pending)) = stack.last_mut() else { break };
        let Some(name) = pending.pop() else {
            stack.pop();
            continue;
        };
        if depth > MAX_WALK_DEPTH {
            complete = false;
            continue;
        }
        let sub = match rustix::fs::openat(&*dir, name.as_c_str(), flags, Mode::empty()) {
            Ok(sub) => sub,
            // Gone, or replaced by a link or a file since it was read: not walked.
            Err(Errno::NOENT | Errno::LOOP | Errno::NOTDIR) => continue,
            Err(e) => return Err(errno(e)),
        };
        let sub_name = format!("{prefix}/{}", name.to_str().unwrap_or_default());
        match read_level(&sub, &sub_name, (&mut found, &mut seen), max)? {
            Some(subdirs) => stack.push((sub, sub_name, subdirs)),
            None => return Ok((found, false)),
        }
    }
    Ok((found, complete))
}

/// Reads one directory: its regular files into `found`, its subdirectories' names answered
/// (counted in `seen`); `None` once `max` files or `max` directories have been seen.
fn read_level(
    dir: &OwnedFd,
    prefix: &str,
    (found, seen): (&mut Vec<ListedFile>, &mut usize),
    max: usize,
) -> std::io::Result<Option<Vec<std::ffi::CString>>> {
    let mut subdirs = Vec::new();
    for entry in Dir::read_from(dir).map_err(errno)? {
        let entry = entry.map_err(errno)?;
        let Ok(name) = entry.file_name().to_str() else { continue };
        if name == "." || name == ".." {
            continue;
        }
        let stat = match rustix::fs::statat(dir, entry.file_name(), AtFlags::SYMLINK_NOFOLLOW) {
            Ok(stat) => stat,
            Err(Errno::NOENT) => continue,
            Err(e) => return Err(errno(e)),
        };
        match FileType::from_raw_mode(stat.st_mode) {
            FileType::Directory => {
                if *seen >= max {
                    return Ok(None);
                }
                *seen += 1;
                subdirs.push(entry.file_name().to_owned());
            }
            FileType::RegularFile => {
                if found.len() >= max {
                    return Ok(None);
                }
                let modified = stat.st_mtime.saturating_mul(1000).saturating_add(stat.st_mtime_nsec as i64 / 1_000_000);
                found.push((format!("{prefix}/{name}"), u64::try_from(stat.st_size).unwrap_or(0), modified));
            }
            _ => {}
        }
    }
    Ok(Some(subdirs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_below_the_root_are_never_followed() {
        let base = tempfile::tempdir().unwrap();
        let root = base.path().join("wh");
        let outside = base.path().join("outside");
        std::fs::create_dir_all(root.join("ns/t/data")).unwrap();
        std::fs::create_dir_all(root.join("ns/victim/data")).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(root.join("ns/victim/data/v.parquet"), b"victim").unwrap();
        std::fs::write(outside.join("secret"), b"outside").unwrap();
        std::fs::write(root.join("ns/t/data/own.parquet"), b"own").unwrap();
        // Links a client planted in its own table's directory.
        std::os::unix::fs::symlink(root.join("ns/victim"), root.join("ns/t/data/to-victim")).unwrap();
        std::os::unix::fs::symlink(&outside, root.join("ns/t/data/to-outside")).unwrap();
        std::os::unix::fs::symlink(outside.join("secret"), root.join("ns/t/secret-link")).unwrap();
        std::os::unix::fs::symlink(root.join("ns/victim"), root.join("ns/t/metadata")).unwrap();
        let root_url = format!("file://{}", root.display());
        let at = |path: &str| format!("{root_url}/{path}");

        // A write through a linked directory fails; nothing appears at the link's target.
        assert!(write_new(&root_url, &at("ns/t/metadata/00001.metadata.json"), b"{}", true).is_err());
        assert!(!root.join("ns/victim/00001.metadata.json").exists());
        // A read through a link, of a link, or of a FIFO is refused.
        assert!(matches!(read(&root_url, &at("ns/t/secret-link"), 1 << 20).unwrap(), Found::NotAFile));
        assert!(read(&root_url, &at("ns/t/data/to-outside/secret"), 1 << 20).is_err());
        rustix::fs::mkfifoat(rustix::fs::CWD, root.join("ns/t/fifo"), Mode::from_raw_mode(0o644)).unwrap();
        assert!(matches!(read(&root_url, &at("ns/t/fifo"), 1 << 20).unwrap(), Found::NotAFile));
        // A purge removes the links, never their targets.
        let (deleted, _, complete) = delete_below(&root_url, &at("ns/t"), 1000).unwrap();
        assert_eq!(deleted, 6, "own.parquet, three links in data and at the top, the metadata link, the FIFO");
        assert!(complete);
        assert_eq!(std::fs::read(root.join("ns/victim/data/v.parquet")).unwrap(), b"victim");
        assert_eq!(std::fs::read(outside.join("secret")).unwrap(), b"outside");
        assert!(!root.join("ns/t").exists(), "the table's directory went with its files");
        assert!(root.join("ns/victim").is_dir());
        // Ordinary files are written, read and deleted.
        write_new(&root_url, &at("ns/t/metadata/00002.metadata.json"), b"{\"a\":1}", true).unwrap();
        assert!(write_new(&root_url, &at("ns/t/metadata/00002.metadata.json"), b"{}", false).is_err(), "no overwrite");
        assert!(
            matches!(read(&root_url, &at("ns/t/metadata/00002.metadata.json"), 1 << 20).unwrap(), Found::Bytes(b) if b == b"{\"a\":1}")
        );
        assert!(matches!(read(&root_url, &at("ns/t/metadata/00002.metadata.json"), 3).unwrap(), Found::TooLarge(7)));
        delete(&root_url, &at("ns/t/metadata/00002.metadata.json")).unwrap();
        assert!(matches!(read(&root_url, &at("ns/t/metadata/00002.metadata.json"), 1 << 20).unwrap(), Found::Missing));
        assert!(components(&root_url, &at("ns/../x")).is_err());
    }

    #[test]
    fn a_walk_holds_descriptors_for_its_depth_only_and_bounds_directories() {
        let base = tempfile::tempdir().unwrap();
        let root = base.path().join("src");
        // More sibling directories than this process may hold descriptors (20,000 here): a walk
        // that opened every pending directory at once ran out of them.
        for i in 0..25_000 {
            std::fs::create_dir_all(root.join(format!("d{i}"))).unwrap();
        }
        std::fs::write(root.join("d7/f.parquet"), b"x").unwrap();
        let url = format!("file://{}", root.display());
        let (found, complete) = list_source(&url, &url, 100_000).unwrap();
        assert!(complete);
        assert_eq!(found.iter().map(|f| f.0.clone()).collect::<Vec<_>>(), [format!("{url}/d7/f.parquet")]);
        // Directories count against the bound like files.
        let (_, complete) = list_source(&url, &url, 1_000).unwrap();
        assert!(!complete, "25,000 directories are more than 1,000");
        // Deeper than the walk descends: not listed, and the listing says it is incomplete.
        let mut deep = base.path().join("deep");
        for i in 0..MAX_WALK_DEPTH + 5 {
            deep = deep.join(format!("l{i}"));
        }
        std::fs::create_dir_all(&deep).unwrap();
        std::fs::write(deep.join("f.parquet"), b"x").unwrap();
        let deep_url = format!("file://{}", base.path().join("deep").display());
        let (found, complete) = list_source(&deep_url, &deep_url, 100_000).unwrap();
        assert!(found.is_empty() && !complete);
    }
}
