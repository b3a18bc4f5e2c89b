//! Reading the files the gateway is pointed at (configuration, certificates): regular files
//! of bounded size only. A named pipe would block the reader until someone writes to it, a
//! device such as `/dev/zero` never ends, and either would stall a reload or exhaust memory.

use std::io::Read;
use std::path::Path;

/// The largest file read (configurations and PEM bundles are kilobytes).
pub const MAX_FILE_BYTES: u64 = 1024 * 1024;

/// The bytes of the regular file at `path`, at most [`MAX_FILE_BYTES`]; errors name the path.
pub fn read_bounded(path: &Path) -> Result<Vec<u8>, String> {
    let bad = |what: &dyn std::fmt::Display| format!("{}: {what}", path.display());
    let regular = |m: &std::fs::Metadata| {
        if !m.is_file() {
            return Err(bad(
                &"not a regular file (a pipe, device or directory is refused)",
            ));
        }
        if m.len() > MAX_FILE_BYTES {
            return Err(bad(&format_args!("larger than {MAX_FILE_BYTES} bytes")));
        }
        Ok(())
    };
    // Checked before opening (opening a pipe blocks), and again on what was opened.
    regular(&std::fs::metadata(path).map_err(|e| bad(&e))?)?;
    let file = std::fs::File::open(path).map_err(|e| bad(&e))?;
    regular(&file.metadata().map_err(|e| bad(&e))?)?;
    let mut bytes = Vec::new();
    file.take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| bad(&e))?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(bad(&format_args!("larger than {MAX_FILE_BYTES} bytes")));
    }
    Ok(bytes)
}

/// [`read_bounded`] as UTF-8 text.
pub fn read_text(path: &Path) -> Result<String, String> {
    String::from_utf8(read_bounded(path)?).map_err(|e| format!("{}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pipes_devices_and_directories_are_refused() {
        for p in ["/dev/zero", "/dev/null", "/tmp"] {
            let err = read_bounded(Path::new(p)).unwrap_err();
            assert!(err.contains("not a regular file"), "{p}: {err}");
        }
    }
}
