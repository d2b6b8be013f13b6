//! Scanning a whole log, raw or zstd: header, valid prefix, torn tail (reference 01 §4.3–4.5).
//!
//! Memory stays bounded whatever the log's length: bytes are read in chunks, zstd frames are
//! decoded as streams, and events go to the sink as soon as they are committed.

use std::{io, path::Path, sync::Arc};

use session_core::SessionHeader;
use tokio_util::sync::CancellationToken;

use super::{
    Compression,
    header::{HeaderLineError, decode},
    scanner::LineScanner,
    zstd::{FrameStream, Piece, SEGMENT_BYTES, StreamEnd, read_full, walk_frames, walk_segments},
};
use crate::{
    backend::{ScanSink, TornTail},
    error::{CorruptKind, Location, PersistenceError, Result},
};

/// Raw bytes read per call.
const READ_CHUNK: usize = 256 << 10;

/// Compressed logs longer than this are decompressed on a second thread ahead of decoding.
pub(crate) const RUN_AHEAD_MIN_BYTES: u64 = 256 << 10;

/// The longest header line (or header frame plaintext) a reader accepts.
pub const MAX_HEADER_BYTES: usize = 1 << 20;

// Every header a writer accepts (its fields within session-core's bounds) reads back.
const _: () = assert!(session_core::MAX_HEADER_JSON_BYTES < MAX_HEADER_BYTES);

/// Positioned reads over a log's bytes; a file, or a buffer in tests. A source is shared with
/// the thread that decompresses a long log ahead of decoding.
pub trait ByteSource: Sync {
    /// The number of bytes to read; a scan never reads past it.
    fn len(&self) -> u64;

    /// Reads at `offset` into `buf`, returning how many bytes were read (0 at the end).
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<usize>;

    /// Whether the source holds no byte at all (an empty file).
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl ByteSource for &[u8] {
    fn len(&self) -> u64 {
        <[u8]>::len(self) as u64
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
        let Some(rest) = usize::try_from(offset).ok().and_then(|offset| self.get(offset..)) else {
            return Ok(0);
        };
        let n = rest.len().min(buf.len());
        buf[..n].copy_from_slice(&rest[..n]);
        Ok(n)
    }
}

impl ByteSource for Vec<u8> {
    fn len(&self) -> u64 {
        self.as_slice().len() as u64
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
        self.as_slice().read_at(offset, buf)
    }
}

/// The result of a scan besides the streamed events.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogScan {
    /// The log's header.
    pub header: Arc<SessionHeader>,
    /// Events streamed: the valid prefix, recovered events of a torn zstd frame included.
    pub n_events: u64,
    /// The uncommitted tail, if the log has one.
    pub torn: Option<TornTail>,
    /// Bytes of log text decoded (decompressed for zstd), header included.
    pub n_bytes: u64,
}

/// Scans the log in `source`: hands the header and then each event of the valid prefix to
/// `sink`, and reports the torn tail. `path` names the log in errors.
pub fn scan_log(
    source: &dyn ByteSource,
    compression: Compression,
    path: &Path,
    cancel: &CancellationToken,
    sink: &mut dyn ScanSink,
) -> Result<LogScan> {
    scan_log_known(source, compression, path, cancel, None, sink)
}

/// A header already decoded from a log's leading bytes: the header line (raw) or the whole header
/// frame (zstd) exactly as stored, which decoded to `header` without error.
#[derive(Debug, Clone)]
pub(crate) struct KnownHeader {
    pub(crate) header: Arc<SessionHeader>,
    /// The stored bytes: the header line with its newline, or the compressed header frame.
    pub(crate) bytes: Arc<[u8]>,
    /// The header's plaintext length, newline included.
    pub(crate) plain_len: u64,
}

/// [`scan_log`], given the header the log's leading bytes decoded to when they were last read.
/// If the log still starts with exactly those bytes, the header is not decompressed or decoded
/// again: identical bytes decode identically, so the scan's result is the same either way. Any
/// other log is scanned from its first byte.
pub(crate) fn scan_log_known(
    source: &dyn ByteSource,
    compression: Compression,
    path: &Path,
    cancel: &CancellationToken,
    known: Option<&KnownHeader>,
    sink: &mut dyn ScanSink,
) -> Result<LogScan> {
    if cancel.is_cancelled() {
        return Err(PersistenceError::Cancelled);
    }
    let known = match known {
        Some(known) => still_leads(source, known).map_err(|error| PersistenceError::io(path, error))?.then_some(known),
        None => None,
    };
    scan_resumed(source, compression, path, cancel, known.map(Resume::after_header), 0, sink)
}

/// Where a read starts other than at the log's first byte: after a header already decoded, or,
/// for a suffix read, at a line (raw) or frame (zstd) boundary further in.
#[derive(Debug, Clone)]
pub(crate) struct Resume {
    /// The log's header, handed to the sink without being read again.
    pub(crate) header: Arc<SessionHeader>,
    /// The file offset of the first byte to read.
    pub(crate) offset: u64,
    /// The log text's offset there (the file offset for raw logs; for zstd, the header's
    /// plaintext length after the header frame, and 0 further in, where it is not known).
    pub(crate) text_offset: u64,
    /// The seq of the first event read.
    pub(crate) seq: u64,
}

impl Resume {
    /// Right after `known`'s header.
    pub(crate) fn after_header(known: &KnownHeader) -> Resume {
        Resume {
            header: Arc::clone(&known.header),
            offset: known.bytes.len() as u64,
            text_offset: known.plain_len,
            seq: 0,
        }
    }
}

/// Scans `source` from `resume` (from its first byte without one), handing the sink the events
/// from `from_seq` on.
pub(crate) fn scan_resumed(
    source: &dyn ByteSource,
    compression: Compression,
    path: &Path,
    cancel: &CancellationToken,
    resume: Option<Resume>,
    from_seq: u64,
    sink: &mut dyn ScanSink,
) -> Result<LogScan> {
    match compression {
        Compression::None => scan_raw(source, path, cancel, resume, from_seq, sink),
        Compression::Zstd => scan_zstd(source, path, cancel, resume, from_seq, sink),
    }
}

/// Whether `source` starts with `known`'s bytes.
pub(crate) fn still_leads(source: &dyn ByteSource, known: &KnownHeader) -> io::Result<bool> {
    if source.len() < known.bytes.len() as u64 {
        return Ok(false);
    }
    let mut leading = vec![0; known.bytes.len()];
    let got = read_full(source, 0, &mut leading)?;
    Ok(got == leading.len() && *leading == *known.bytes)
}

fn corrupt_header(path: &Path, message: &str) -> PersistenceError {
    PersistenceError::corrupt(CorruptKind::Header, Location::file(path), message)
}

fn deliver_header(line: &[u8], path: &Path, sink: &mut dyn ScanSink) -> Result<Arc<SessionHeader>> {
    let header = Arc::new(decode(line).map_err(|error| error.into_error(path))?);
    sink.header(&header)?;
    Ok(header)
}

fn scan_raw(
    source: &dyn ByteSource,
    path: &Path,
    cancel: &CancellationToken,
    resume: Option<Resume>,
    from_seq: u64,
    sink: &mut dyn ScanSink,
) -> Result<LogScan> {
    let len = source.len();
    let mut buf = vec![0; usize::try_from(len).unwrap_or(usize::MAX).min(READ_CHUNK)];
    let mut header_line = Vec::new();
    let mut header = None;
    let mut scanner: Option<LineScanner> = None;
    let mut offset = 0;
    if let Some(resume) = resume {
        sink.header(&resume.header)?;
        header = Some(resume.header);
        scanner = Some(LineScanner::resumed(path, resume.offset, resume.seq));
        offset = resume.offset;
    }
    while offset < len {
        if cancel.is_cancelled() {
            return Err(PersistenceError::Cancelled);
        }
        let want = usize::try_from(len - offset).unwrap_or(usize::MAX).min(READ_CHUNK);
        let got = read_full(source, offset, &mut buf[..want]).map_err(|error| PersistenceError::io(path, error))?;
        if got == 0 {
            break;
        }
        let mut rest = &buf[..got];
        if scanner.is_none() {
            let Some(newline) = memchr::memchr(b'\n', rest) else {
                header_line.extend_from_slice(rest);
                if header_line.len() > MAX_HEADER_BYTES {
                    let message = format!("corrupt session log: header line exceeds {MAX_HEADER_BYTES} bytes");
                    return Err(corrupt_header(path, &message));
                }
                offset += got as u64;
                continue;
            };
            header_line.extend_from_slice(&rest[..newline]);
            header = Some(deliver_header(&header_line, path, sink)?);
            scanner = Some(LineScanner::new(path, offset + newline as u64 + 1));
            rest = &rest[newline + 1..];
        }
        if let Some(scanner) = scanner.as_mut() {
            scanner
                .feed(rest, &mut |event| if event.seq >= from_seq { sink.event(Arc::new(event)) } else { Ok(()) })?;
        }
        offset += got as u64;
    }
    let (Some(header), Some(scanner)) = (header, scanner) else {
        return Err(corrupt_header(path, "empty or header-less session log"));
    };
    let committed = scanner.committed();
    Ok(LogScan {
        header,
        n_events: scanner.n_events(),
        torn: (committed < offset).then(|| TornTail { truncate_to: committed, recovered: Vec::new() }),
        n_bytes: offset,
    })
}

fn scan_zstd(
    source: &dyn ByteSource,
    path: &Path,
    cancel: &CancellationToken,
    resume: Option<Resume>,
    from_seq: u64,
    sink: &mut dyn ScanSink,
) -> Result<LogScan> {
    let len = source.len();
    // A resumed read starts at a frame boundary: the header frame's end, or one a seek found.
    let start = resume.as_ref().map_or(0, |resume| resume.offset);
    let (walk, segment_ends) = walk_segments(source, len, start, path, cancel, SEGMENT_BYTES)?;
    if resume.is_none() && walk.n_complete == 0 {
        return Err(corrupt_header(path, "empty or header-less Zstandard session log"));
    }
    let mut stream = FrameStream::new(source, len).map_err(|error| PersistenceError::io(path, error))?;
    let mut header_text = Vec::new();
    let mut header: Option<Arc<SessionHeader>> = None;
    let mut scanner: Option<LineScanner> = None;
    let mut n_bytes = 0u64;
    if let Some(resume) = resume {
        sink.header(&resume.header)?;
        header = Some(resume.header);
        let mut events = LineScanner::resumed(path, resume.text_offset, resume.seq);
        events.set_frame_start(start);
        scanner = Some(events);
        n_bytes = resume.text_offset;
    }
    let read_ahead = walk.complete_end - start > RUN_AHEAD_MIN_BYTES && sink.read_ahead();
    let decoders = sink.read_ahead_decoders();
    let on_piece = &mut |piece: Piece<'_>| {
        match piece {
            Piece::Plaintext(bytes) => {
                n_bytes += bytes.len() as u64;
                match scanner.as_mut() {
                    Some(scanner) => scanner.feed(bytes, &mut |event| {
                        if event.seq >= from_seq { sink.event(Arc::new(event)) } else { Ok(()) }
                    })?,
                    None if header_text.len() + bytes.len() > MAX_HEADER_BYTES => {
                        return Err(corrupt_header(
                            path,
                            "corrupt Zstandard session log: first frame is not exactly one header line",
                        ));
                    }
                    None => header_text.extend_from_slice(bytes),
                }
            }
            Piece::FrameEnd { end } => match scanner.as_mut() {
                Some(scanner) => scanner.set_frame_start(end),
                None => {
                    let line = header_frame_line(&header_text).ok_or_else(|| {
                        corrupt_header(
                            path,
                            "corrupt Zstandard session log: first frame is not exactly one header line",
                        )
                    })?;
                    header = Some(deliver_header(line, path, sink)?);
                    let mut events = LineScanner::new(path, header_text.len() as u64);
                    events.set_frame_start(end);
                    scanner = Some(events);
                }
            },
        }
        Ok(())
    };
    // A long log is decompressed on helper threads while this one decodes, if the sink wants.
    let end = if read_ahead {
        stream.run_ahead(start, &segment_ends, decoders, path, cancel, on_piece)?
    } else {
        stream.run(start, walk.complete_end, path, cancel, on_piece)?
    };
    match end {
        StreamEnd::Exhausted { frame_start } if frame_start == walk.complete_end => {}
        StreamEnd::Exhausted { frame_start } | StreamEnd::Failed { frame_start } => {
            return Err(PersistenceError::corrupt(
                CorruptKind::Frame,
                Location::at_byte(path, frame_start),
                format!("corrupt Zstandard session log: frame at byte {frame_start} failed validation"),
            ));
        }
    }
    let (Some(header), Some(mut scanner)) = (header, scanner) else {
        return Err(corrupt_header(path, "empty or header-less Zstandard session log"));
    };
    if scanner.committed() != scanner.input() {
        // Only the final, incomplete frame may hold a torn tail: any defect before is fatal.
        let message = "corrupt Zstandard session log: complete frame contains a torn JSONL record";
        return Err(match scanner.issue() {
            Some(issue) => issue.to_error_with_prefix(path, message),
            None => PersistenceError::corrupt(CorruptKind::TornRecordInFrame, Location::file(path), message),
        });
    }
    let torn = match walk.torn_start {
        None => None,
        Some(torn_start) => {
            // A torn final frame: decode what is there, without its checksum; complete lines in
            // it are recovered events. A decoder error only ends the recovery.
            let mut recovered = Vec::new();
            scanner.set_frame_start(torn_start);
            stream.run(torn_start, len, path, cancel, &mut |piece| {
                if let Piece::Plaintext(bytes) = piece {
                    n_bytes += bytes.len() as u64;
                    scanner.feed(bytes, &mut |event| {
                        recovered.push(event.clone());
                        if event.seq >= from_seq { sink.event(Arc::new(event)) } else { Ok(()) }
                    })?;
                }
                Ok(())
            })?;
            Some(TornTail { truncate_to: torn_start, recovered })
        }
    };
    Ok(LogScan { header, n_events: scanner.n_events(), torn, n_bytes })
}

/// The header frame's plaintext must be exactly one newline-terminated line.
fn header_frame_line(plaintext: &[u8]) -> Option<&[u8]> {
    let line = plaintext.strip_suffix(b"\n")?;
    memchr::memchr(b'\n', line).is_none().then_some(line)
}

/// Reads only the header of a log, for listing. `Ok(None)` means junk to skip silently: an
/// empty or incomplete first line or frame, or a first line that is not a header. A damaged
/// header frame, retired fields and I/O failures are errors; a foreign version is listed.
pub(crate) fn read_header(
    source: &dyn ByteSource,
    compression: Compression,
    path: &Path,
    cancel: &CancellationToken,
) -> Result<Option<HeaderRead>> {
    let (line, stored_len) = match compression {
        Compression::None => match read_first_line(source, path, cancel)? {
            Some(line) => {
                let stored_len = line.len() + 1;
                (line, stored_len)
            }
            None => return Ok(None),
        },
        Compression::Zstd => match read_header_frame(source, path, cancel)? {
            Some(frame) => frame,
            None => return Ok(None),
        },
    };
    match decode(&line) {
        Ok(header) => {
            let header = Arc::new(header);
            // What a scan may reuse: the stored bytes of a header that decoded without error.
            let mut bytes = vec![0; stored_len];
            let got = read_full(source, 0, &mut bytes).map_err(|error| PersistenceError::io(path, error))?;
            let known = (got == stored_len).then(|| KnownHeader {
                header: Arc::clone(&header),
                bytes: bytes.into(),
                plain_len: line.len() as u64 + 1,
            });
            Ok(Some(HeaderRead { header, known }))
        }
        Err(HeaderLineError::NotJson | HeaderLineError::NotHeader { .. }) => Ok(None),
        Err(HeaderLineError::Unsupported { header, .. }) => {
            Ok(header.map(|header| HeaderRead { header: Arc::new(*header), known: None }))
        }
        Err(error @ HeaderLineError::Retired) => Err(error.into_error(path)),
    }
}

/// A header read for listing.
#[derive(Debug)]
pub(crate) struct HeaderRead {
    pub(crate) header: Arc<SessionHeader>,
    /// Present if the header decoded without error, for a later scan to reuse.
    pub(crate) known: Option<KnownHeader>,
}

fn read_first_line(source: &dyn ByteSource, path: &Path, cancel: &CancellationToken) -> Result<Option<Vec<u8>>> {
    const CHUNK: usize = 8 << 10;
    let mut line = Vec::new();
    let mut buf = [0u8; CHUNK];
    let mut offset = 0;
    while offset < source.len() && line.len() <= MAX_HEADER_BYTES {
        if cancel.is_cancelled() {
            return Err(PersistenceError::Cancelled);
        }
        let got = source.read_at(offset, &mut buf).map_err(|error| PersistenceError::io(path, error))?;
        if got == 0 {
            break;
        }
        if let Some(newline) = memchr::memchr(b'\n', &buf[..got]) {
            line.extend_from_slice(&buf[..newline]);
            return Ok(Some(line));
        }
        line.extend_from_slice(&buf[..got]);
        offset += got as u64;
    }
    Ok(None)
}

/// The header frame's line and the frame's stored length.
fn read_header_frame(
    source: &dyn ByteSource,
    path: &Path,
    cancel: &CancellationToken,
) -> Result<Option<(Vec<u8>, usize)>> {
    let walk = walk_frames(source, source.len(), path, cancel, Some(1))?;
    if walk.n_complete == 0 {
        return Ok(None);
    }
    let failed = || corrupt_header(path, "corrupt Zstandard session log: header frame failed validation");
    let mut plaintext = Vec::new();
    let mut stream = FrameStream::new(source, walk.complete_end).map_err(|error| PersistenceError::io(path, error))?;
    let end = stream.run(0, walk.complete_end, path, cancel, &mut |piece| {
        if let Piece::Plaintext(bytes) = piece {
            if plaintext.len() + bytes.len() > MAX_HEADER_BYTES {
                return Err(failed());
            }
            plaintext.extend_from_slice(bytes);
        }
        Ok(())
    })?;
    if end != (StreamEnd::Exhausted { frame_start: walk.complete_end }) {
        return Err(failed());
    }
    let line = header_frame_line(&plaintext).ok_or_else(|| {
        corrupt_header(path, "corrupt Zstandard session log: first frame is not exactly one header line")
    })?;
    let frame_len = usize::try_from(walk.complete_end).map_err(|_| failed())?;
    Ok(Some((line.to_vec(), frame_len)))
}
