//! Files the configuration names (a CA bundle, Google credentials, the configuration itself),
//! read with a bound: only a regular file (or a link to one) of at most the size given is read,
//! since a pipe would block the reload that read it and a device (`/dev/zero`) fill memory.

use std::io::{Error, ErrorKind, Read};
use std::path::Path;

/// The bytes of the regular file at `path`, of at most `most` bytes; else an error that says
/// what the path is instead, or how large a file may be.
pub fn read_bounded(path: &Path, most: u64) -> std::io::Result<Vec<u8>> {
    let too_large =
        || Error::new(ErrorKind::InvalidData, format!("it holds more than {}, the most it may", size(most)));
    let metadata = std::fs::metadata(path)?;
    if !metadata.is_file() {
        let what =
            if metadata.is_dir() { "a directory" } else { "not a regular file (a pipe, socket or device)" };
        return Err(Error::new(ErrorKind::InvalidInput, format!("it is {what}")));
    }
    if metadata.len() > most {
        return Err(too_large());
    }
    let mut bytes = Vec::new();
    // Bounded again as read: the file may grow between the two.
    std::fs::File::open(path)?.take(most + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > most {
        return Err(too_large());
    }
    Ok(bytes)
}

/// `bytes` as people write a size (`16 MiB`, `4 KiB`).
fn size(bytes: u64) -> String {
    match bytes {
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{} MiB", b >> 20),
        b if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{} KiB", b >> 10),
        b => format!("{b} bytes"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_regular_file_within_its_bound_is_read() {
        let refused = |path: &Path, most| read_bounded(path, most).unwrap_err().to_string();
        assert!(refused(Path::new("/dev/zero"), 1 << 20).contains("not a regular file"));
        let dir = std::env::temp_dir().join(format!("switchyard-files-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        assert!(refused(&dir, 1 << 20).contains("a directory"));
        let file = dir.join("f");
        std::fs::write(&file, vec![b'x'; 5000]).unwrap();
        assert_eq!(refused(&file, 4 << 10), "it holds more than 4 KiB, the most it may");
        assert_eq!(read_bounded(&file, 5000).unwrap().len(), 5000);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
