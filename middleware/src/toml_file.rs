//! Reading configuration files: one place for the limits on what is read and the error
//! texts.

use std::path::Path;

use redis_rl_client::error::{Error, Result};

/// The largest configuration file read (a real one is a few kilobytes).
pub const MAX_CONFIG_BYTES: u64 = 1024 * 1024;

/// The text of the regular file at `path`, at most [`MAX_CONFIG_BYTES`] long (an error
/// names the file). Anything else is refused before it is read: a named pipe would block
/// the reader until someone writes to it, and a device such as `/dev/zero` never ends.
pub(crate) fn read(path: &Path) -> Result<String> {
    use std::io::Read;
    let bad = |what: String| Error::Config(format!("{}: {what}", path.display()));
    let regular = |m: &std::fs::Metadata| {
        if !m.is_file() {
            return Err(bad(
                "not a regular file (a pipe, device or directory is refused)".into(),
            ));
        }
        if m.len() > MAX_CONFIG_BYTES {
            return Err(bad(format!("larger than {MAX_CONFIG_BYTES} bytes")));
        }
        Ok(())
    };
    // Checked before opening (opening a pipe blocks), and again on what was opened.
    regular(&std::fs::metadata(path).map_err(|e| bad(e.to_string()))?)?;
    let file = std::fs::File::open(path).map_err(|e| bad(e.to_string()))?;
    regular(&file.metadata().map_err(|e| bad(e.to_string()))?)?;
    let mut text = String::new();
    file.take(MAX_CONFIG_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(|e| bad(e.to_string()))?;
    if text.len() as u64 > MAX_CONFIG_BYTES {
        return Err(bad(format!("larger than {MAX_CONFIG_BYTES} bytes")));
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_regular_files_of_bounded_size_are_read() {
        let err = read(Path::new("/dev/zero")).unwrap_err().to_string();
        assert!(err.contains("not a regular file"), "{err}");
        let err = read(Path::new("/tmp")).unwrap_err().to_string();
        assert!(err.contains("not a regular file"), "{err}");
        let dir = std::env::temp_dir().join(format!("rl-toml-read-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let big = dir.join("big.toml");
        std::fs::write(&big, vec![b'#'; MAX_CONFIG_BYTES as usize + 1]).unwrap();
        let err = read(&big).unwrap_err().to_string();
        assert!(err.contains("larger than"), "{err}");
        let ok = dir.join("ok.toml");
        std::fs::write(&ok, "a = 1\n").unwrap();
        assert_eq!(read(&ok).unwrap(), "a = 1\n");
        let fifo = dir.join("pipe.toml");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        if made.is_ok_and(|s| s.success()) {
            let err = read(&fifo).unwrap_err().to_string();
            assert!(err.contains("not a regular file"), "{err}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
