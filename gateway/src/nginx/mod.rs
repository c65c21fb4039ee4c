//! `gateway import-nginx FILE`: an nginx.conf read as Nginx reads it (`parse`), and its
//! `http` servers turned into the gateway's `[server]` and `[[route]]`s, with a note on every
//! directive not mapped or mapped with another meaning, at its `file:line:col` (`import`).

mod import;
mod limits;
mod logs;
mod note;
mod parse;

pub use import::Import;
pub use note::Note;

/// Reads `path` (and its includes) and imports it; `Err` on a file Nginx would refuse to read.
pub fn import_file(path: &std::path::Path) -> Result<Import, String> {
    Ok(import::import(&parse::read(path)?))
}
