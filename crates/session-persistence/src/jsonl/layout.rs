//! Directory layout and naming (reference 01 §4.1):
//! `<root>/--<projectKey(cwd)>--/<encodeSegment(id)>/session.jsonl[.zstd]`, or `_no-cwd` for
//! sessions without a cwd.

use crate::error::{PersistenceError, Result};

/// The project directory of sessions that have no cwd.
pub(crate) const NO_CWD: &str = "_no-cwd";

/// The longest file name most file systems accept, in bytes.
pub(crate) const MAX_COMPONENT_BYTES: usize = 255;

/// The longest project-key slug; with the `--…--` wrapping a key is at most 255 bytes.
const MAX_SLUG: usize = 251;

fn is_safe(unit: u16) -> bool {
    u8::try_from(unit).is_ok_and(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'.' | b'_' | b'-'))
}

fn escape(out: &mut String, unit: u16) {
    use std::fmt::Write;
    let _ = write!(out, "~{unit:04X}");
}

/// Encodes a session id as one path segment, injectively over UTF-16 code units: `[A-Za-z0-9._-]`
/// stays literal, every other unit (`~` included) becomes `~XXXX`; `.` and `..` are escaped
/// whole. Fails on an empty id, and on an id whose segment exceeds 255 bytes (no file system
/// could hold it).
pub fn encode_segment(id: &str) -> Result<String> {
    if id.is_empty() {
        return Err(PersistenceError::invalid_input("cannot encode an empty path segment"));
    }
    let segment = match id {
        "." => "~002E".to_owned(),
        ".." => "~002E~002E".to_owned(),
        _ => {
            let mut segment = String::with_capacity(id.len());
            for unit in id.encode_utf16() {
                if is_safe(unit) {
                    segment.push(char::from(unit as u8));
                } else {
                    escape(&mut segment, unit);
                }
            }
            segment
        }
    };
    if segment.len() > MAX_COMPONENT_BYTES {
        return Err(PersistenceError::invalid_input(format!(
            "session id {id:?} encodes to a {}-byte path component, over the {MAX_COMPONENT_BYTES}-byte limit of a \
             file name; use a shorter id",
            segment.len()
        )));
    }
    Ok(segment)
}

/// The readable, lossy project directory name of a cwd: each run of `/`, `\` or `:` becomes
/// one `-`, other unsafe units are escaped as in [`encode_segment`], leading `-` are stripped,
/// an empty slug becomes `root`, the slug is cut to 251 bytes and wrapped as `--<slug>--`.
pub fn project_key(cwd: &str) -> Result<String> {
    if cwd.is_empty() {
        return Err(PersistenceError::invalid_input("cannot encode an empty project path"));
    }
    let mut readable = String::with_capacity(cwd.len());
    let mut in_separator_run = false;
    for unit in cwd.encode_utf16() {
        if matches!(unit, 0x2F | 0x5C | 0x3A) {
            if !in_separator_run {
                readable.push('-');
            }
            in_separator_run = true;
            continue;
        }
        in_separator_run = false;
        if is_safe(unit) {
            readable.push(char::from(unit as u8));
        } else {
            escape(&mut readable, unit);
        }
    }
    let slug = readable.trim_start_matches('-');
    let slug = if slug.is_empty() { "root" } else { slug };
    // The slug is ASCII, so cutting at a byte index is cutting at a character.
    Ok(format!("--{}--", &slug[..slug.len().min(MAX_SLUG)]))
}

/// The project directory name for a session's cwd.
pub(crate) fn project_dir_name(cwd: Option<&str>) -> Result<String> {
    match cwd {
        None => Ok(NO_CWD.to_owned()),
        Some(cwd) => project_key(cwd),
    }
}

/// The id a session directory's name encodes: the inverse of [`encode_segment`]. `None` if the
/// name is not an encoding of any id (an escape that is not `~XXXX`, or unpaired surrogates).
pub(crate) fn decode_segment(segment: &str) -> Option<String> {
    let mut units: Vec<u16> = Vec::with_capacity(segment.len());
    let mut rest = segment;
    while let Some(first) = rest.chars().next() {
        if first == '~' {
            let hex = rest.get(1..5)?;
            if !hex.bytes().all(|byte| byte.is_ascii_hexdigit()) {
                return None;
            }
            units.push(u16::from_str_radix(hex, 16).ok()?);
            rest = &rest[5..];
        } else {
            let unit = u16::try_from(u32::from(first)).ok().filter(|unit| is_safe(*unit))?;
            units.push(unit);
            rest = &rest[first.len_utf8()..];
        }
    }
    String::from_utf16(&units).ok().filter(|id| !id.is_empty())
}
