//! [`RecordRow`]: a checkpoint record as a database row holds it, for checkpoint stores over a
//! database (the SQLite and PostgreSQL crates). The same envelope as the record files of
//! [`DiskCheckpointStore`](crate::DiskCheckpointStore): a format stamp, a version, and a CRC-32
//! of the record's JSON text, each in a column of its own.

use session_core::SessionId;

use crate::{
    disk::{RECORD_FORMAT, RECORD_VERSION},
    record::CheckpointRecord,
};

/// A checkpoint record as the columns of a row: `format`, `version`, `crc32` (of `record`'s
/// bytes) and `record` (its JSON text). Integers are `i64`, as SQL databases store them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordRow {
    /// [`RECORD_FORMAT`].
    pub format: String,
    /// [`RECORD_VERSION`].
    pub version: i64,
    /// The CRC-32 of `record`'s UTF-8 bytes.
    pub crc32: i64,
    /// The record as JSON text.
    pub record: String,
}

impl RecordRow {
    /// The row of `record`, stamped with this build's format and version.
    pub fn encode(record: &CheckpointRecord) -> RecordRow {
        // Invariant: every map in a record is keyed by strings and holds JSON values, so
        // serializing cannot fail.
        let text = serde_json::to_string(record).expect("a checkpoint record serializes to JSON");
        RecordRow {
            format: RECORD_FORMAT.to_owned(),
            version: RECORD_VERSION as i64,
            crc32: i64::from(crc32fast::hash(text.as_bytes())),
            record: text,
        }
    }

    /// The record this row holds for `id`, or why it cannot be used (`foreign: …`,
    /// `version-mismatched: …` or `corrupt: …`). A store discards such a row, reading it as
    /// absent, and the next write replaces it.
    pub fn decode(&self, id: &SessionId) -> Result<CheckpointRecord, String> {
        let RecordRow { format, version, crc32, record } = self;
        if format != RECORD_FORMAT {
            return Err(format!("foreign: the row's format is {format:?}, not {RECORD_FORMAT:?}"));
        }
        if u64::try_from(*version).ok() != Some(RECORD_VERSION) {
            return Err(format!("version-mismatched: version {version}, this build reads {RECORD_VERSION}"));
        }
        if i64::from(crc32fast::hash(record.as_bytes())) != *crc32 {
            return Err("corrupt: the record fails its checksum".to_owned());
        }
        let decoded: CheckpointRecord =
            serde_json::from_str(record).map_err(|error| format!("corrupt: {error} (session {id})"))?;
        decoded.validate().map_err(|error| format!("corrupt: {error}"))?;
        Ok(decoded)
    }
}
