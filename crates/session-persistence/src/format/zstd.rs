//! Zstandard framing (reference 01 §4.4): one checksummed frame per durable batch, a structural
//! frame walker, and a streaming frame decoder.

use std::{io, path::Path};

use tokio_util::sync::CancellationToken;
use zstd::{
    stream::raw::{CParameter, Decoder, InBuffer, Operation, OutBuffer},
    zstd_safe::DCtx,
};

use super::scan::ByteSource;
use crate::{
    error::{CorruptKind, Location, PersistenceError, Result},
    threads::spawn_helper,
};

/// The frame magic number; stored little-endian as `28 B5 2F FD`.
pub const ZSTD_MAGIC: u32 = 0xFD2F_B528;

/// Compressed bytes read per call while decoding (a buffer per read in flight: small, so that a
/// listing of four reads at a time stays within its memory budget).
const INPUT_CHUNK: usize = 64 << 10;

/// Plaintext decoded per call at most: a quarter of zstd's largest block, which the decoder
/// hands over in pieces; small for the same reason as [`INPUT_CHUNK`].
const OUTPUT_CHUNK: usize = 32 << 10;

/// The structural walker reads ahead this much, so small frames cost no extra reads.
const WALK_WINDOW: usize = 64 << 10;

/// What a walk of one frame reads ahead (the header frame, or a seek's probe).
const PROBE_WINDOW: usize = 4 << 10;

/// Compresses batches into frames: the default level, with a content checksum.
pub struct FrameEncoder {
    compressor: zstd::bulk::Compressor<'static>,
}

impl std::fmt::Debug for FrameEncoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FrameEncoder")
    }
}

impl FrameEncoder {
    /// An encoder at zstd's default level with content checksums on. Fails only if zstd cannot
    /// allocate its context.
    pub fn new() -> io::Result<FrameEncoder> {
        let mut compressor = zstd::bulk::Compressor::new(zstd::DEFAULT_COMPRESSION_LEVEL)?;
        compressor.set_parameter(CParameter::ChecksumFlag(true))?;
        Ok(FrameEncoder { compressor })
    }

    /// One complete frame holding `plaintext`.
    pub fn encode(&mut self, plaintext: &[u8]) -> io::Result<Vec<u8>> {
        self.compressor.compress(plaintext)
    }
}

/// What the structural walk found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FrameWalk {
    pub(crate) n_complete: u64,
    /// The end of the last complete frame.
    pub(crate) complete_end: u64,
    /// Where an incomplete final frame starts (end of file inside it).
    pub(crate) torn_start: Option<u64>,
}

/// A read-ahead window over a source, for walking frame headers.
struct Window<'s> {
    source: &'s dyn ByteSource,
    len: u64,
    start: u64,
    bytes: Vec<u8>,
    /// Bytes read ahead per read.
    ahead: usize,
}

impl Window<'_> {
    /// The `n` bytes at `offset`, or `None` if the source ends first.
    fn get(&mut self, offset: u64, n: usize) -> io::Result<Option<&[u8]>> {
        let Some(end) = offset.checked_add(n as u64).filter(|end| *end <= self.len) else {
            return Ok(None);
        };
        let window_end = self.start + self.bytes.len() as u64;
        if offset < self.start || end > window_end {
            let want = usize::try_from(self.len - offset).unwrap_or(usize::MAX).min(self.ahead.max(n));
            self.bytes.resize(want, 0);
            let got = read_full(self.source, offset, &mut self.bytes)?;
            self.bytes.truncate(got);
            self.start = offset;
            if got < n {
                return Ok(None);
            }
        }
        let at = (offset - self.start) as usize;
        Ok(Some(&self.bytes[at..at + n]))
    }
}

/// Reads until `buf` is full or the source ends; returns the bytes read.
pub(crate) fn read_full(source: &dyn ByteSource, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match source.read_at(offset + filled as u64, &mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
            Err(error) => return Err(error),
        }
    }
    Ok(filled)
}

fn frame_error(path: &Path, byte: u64, what: &str) -> PersistenceError {
    PersistenceError::corrupt(
        CorruptKind::Frame,
        Location::at_byte(path, byte),
        format!("corrupt Zstandard session log: {what} at byte {byte}"),
    )
}

/// Walks frame structure without decompressing: magic, descriptor, block headers, checksum.
/// Stops after `max_frames` complete frames when given. End of file inside a frame is a torn
/// tail; bad magic (with at least 4 bytes left), a reserved descriptor bit or a reserved block
/// type is corruption.
pub(crate) fn walk_frames(
    source: &dyn ByteSource,
    len: u64,
    path: &Path,
    cancel: &CancellationToken,
    max_frames: Option<u64>,
) -> Result<FrameWalk> {
    walk_frames_with(source, len, 0, path, cancel, max_frames, &mut |_| {})
}

/// [`walk_frames`] over every frame from `from` (a frame boundary), which also cuts the complete
/// frames into segments of about `segment_bytes` compressed bytes for [`FrameStream::run_ahead`]:
/// the end of each segment, in order, the last one the walk's `complete_end` (none if no frame
/// is complete).
pub(crate) fn walk_segments(
    source: &dyn ByteSource,
    len: u64,
    from: u64,
    path: &Path,
    cancel: &CancellationToken,
    segment_bytes: u64,
) -> Result<(FrameWalk, Vec<u64>)> {
    let mut ends = Vec::new();
    let mut segment_start = from;
    let walk = walk_frames_with(source, len, from, path, cancel, None, &mut |end| {
        if end - segment_start >= segment_bytes {
            ends.push(end);
            segment_start = end;
        }
    })?;
    if walk.complete_end > segment_start {
        ends.push(walk.complete_end);
    }
    Ok((walk, ends))
}

/// The walk of [`walk_frames`] from `from`, telling `on_frame_end` where each complete frame ends.
fn walk_frames_with(
    source: &dyn ByteSource,
    len: u64,
    from: u64,
    path: &Path,
    cancel: &CancellationToken,
    max_frames: Option<u64>,
    on_frame_end: &mut dyn FnMut(u64),
) -> Result<FrameWalk> {
    // A walk to the header frame alone reads ahead a little, not a whole walk's window.
    let ahead = if max_frames == Some(1) { PROBE_WINDOW } else { WALK_WINDOW };
    let mut window = Window { source, len, start: 0, bytes: Vec::new(), ahead };
    let mut walk = FrameWalk { n_complete: 0, complete_end: from, torn_start: None };
    let io_error = |error| PersistenceError::io(path, error);
    while walk.complete_end < len && max_frames.is_none_or(|max| walk.n_complete < max) {
        if cancel.is_cancelled() {
            return Err(PersistenceError::Cancelled);
        }
        let start = walk.complete_end;
        match walk_frame(&mut window, start, path).map_err(|error| error.map_io(io_error))? {
            Some(end) => {
                walk.n_complete += 1;
                walk.complete_end = end;
                on_frame_end(end);
            }
            None => {
                walk.torn_start = Some(start);
                break;
            }
        }
    }
    Ok(walk)
}

/// Whether a complete, well-formed frame starts at `start` and ends where the source ends or
/// another frame's magic begins: its end, or `None`. What a seek probes with, at a magic number
/// it found, which compressed bytes could hold by chance.
pub(crate) fn frame_at(source: &dyn ByteSource, len: u64, start: u64) -> io::Result<Option<u64>> {
    let mut window = Window { source, len, start: 0, bytes: Vec::new(), ahead: PROBE_WINDOW };
    let end = match walk_frame(&mut window, start, Path::new("")) {
        Ok(Some(end)) => end,
        Ok(None) | Err(WalkError::Corrupt(_)) => return Ok(None),
        Err(WalkError::Io(error)) => return Err(error),
    };
    if end == len {
        return Ok(Some(end));
    }
    let Some(magic) = window.get(end, 4)? else { return Ok(None) };
    Ok((u32::from_le_bytes([magic[0], magic[1], magic[2], magic[3]]) == ZSTD_MAGIC).then_some(end))
}

enum WalkError {
    Io(io::Error),
    Corrupt(PersistenceError),
}

impl WalkError {
    fn map_io(self, io_error: impl FnOnce(io::Error) -> PersistenceError) -> PersistenceError {
        match self {
            WalkError::Io(error) => io_error(error),
            WalkError::Corrupt(error) => error,
        }
    }
}

impl From<io::Error> for WalkError {
    fn from(error: io::Error) -> WalkError {
        WalkError::Io(error)
    }
}

/// The end of the frame at `start`, or `None` if the source ends inside it.
fn walk_frame(window: &mut Window<'_>, start: u64, path: &Path) -> Result<Option<u64>, WalkError> {
    let Some(magic) = window.get(start, 4)? else { return Ok(None) };
    if u32::from_le_bytes([magic[0], magic[1], magic[2], magic[3]]) != ZSTD_MAGIC {
        return Err(WalkError::Corrupt(frame_error(path, start, "invalid frame magic")));
    }
    let mut offset = start + 4;
    let Some(&[descriptor]) = window.get(offset, 1)? else { return Ok(None) };
    if descriptor & 0x18 != 0 {
        return Err(WalkError::Corrupt(frame_error(path, offset, "reserved frame-header bit")));
    }
    offset += 1;
    let content_size_flag = descriptor >> 6;
    let single_segment = descriptor & 0x20 != 0;
    let checksum = descriptor & 0x04 != 0;
    let dictionary_bytes = match descriptor & 0x03 {
        3 => 4,
        flag => u64::from(flag),
    };
    let content_size_bytes = match content_size_flag {
        0 => u64::from(single_segment),
        flag => 1 << flag,
    };
    offset += u64::from(!single_segment) + dictionary_bytes + content_size_bytes;
    loop {
        let Some(header) = window.get(offset, 3)? else { return Ok(None) };
        let header = u32::from_le_bytes([header[0], header[1], header[2], 0]);
        let last = header & 1 != 0;
        let block_type = (header >> 1) & 3;
        if block_type == 3 {
            return Err(WalkError::Corrupt(frame_error(path, offset, "reserved block type")));
        }
        let payload = if block_type == 1 { 1 } else { u64::from(header >> 3) };
        offset += 3 + payload;
        if offset > window.len {
            return Ok(None);
        }
        if last {
            break;
        }
    }
    if checksum {
        offset += 4;
    }
    Ok((offset <= window.len).then_some(offset))
}

/// What the stream delivers while decoding.
pub(crate) enum Piece<'a> {
    Plaintext(&'a [u8]),
    /// A frame ended at this file offset.
    FrameEnd {
        end: u64,
    },
}

/// How a decoding run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StreamEnd {
    /// The input ran out; `frame_start` is where the unfinished frame began (`== end` if none).
    Exhausted { frame_start: u64 },
    /// The decoder rejected the frame that starts at `frame_start` (bad data or checksum).
    Failed { frame_start: u64 },
}

/// What the decompressing thread of [`FrameStream::run_ahead`] hands over: a run of plaintext,
/// which may span many small frames, with the frame ends that fall inside it.
#[derive(Default)]
struct Ahead {
    bytes: Vec<u8>,
    /// In order: where in `bytes` a frame's plaintext ends, and that frame's end in the file.
    frame_ends: Vec<(usize, u64)>,
}

impl Ahead {
    /// Hands the pieces to `on_piece` in the order the decoder produced them.
    fn deliver(&self, on_piece: &mut dyn FnMut(Piece<'_>) -> Result<()>) -> Result<()> {
        let mut delivered = 0;
        for &(at, end) in &self.frame_ends {
            if at > delivered {
                on_piece(Piece::Plaintext(&self.bytes[delivered..at]))?;
                delivered = at;
            }
            on_piece(Piece::FrameEnd { end })?;
        }
        if self.bytes.len() > delivered {
            on_piece(Piece::Plaintext(&self.bytes[delivered..]))?;
        }
        Ok(())
    }
}

/// The decompressing thread of [`FrameStream::run_ahead`] sends a run once it holds this much
/// plaintext, so a log of small frames (one per turn) costs one hand-over per run, not per frame.
const AHEAD_RUN_BYTES: usize = 64 << 10;

#[cfg(test)]
thread_local! {
    /// How many reads this thread ran with [`FrameStream::run_ahead`], so tests can tell.
    pub(crate) static RUN_AHEAD_CALLS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    /// Segments this thread's reads took back from a decoder other than their first.
    pub(crate) static SEGMENTS_FROM_OTHER_DECODERS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Plaintext buffers in flight between the decompressing threads and the consuming one.
const AHEAD_DEPTH: usize = 8;

/// Compressed bytes per segment of a read decompressed ahead (see [`walk_segments`]): the unit
/// the decoding threads take in turn.
pub(crate) const SEGMENT_BYTES: u64 = 64 << 10;

/// Threads that decompress one read ahead at most.
const MAX_DECODERS: usize = 2;

/// What a decoding thread of [`FrameStream::run_ahead`] hands over.
enum Decoded {
    /// Plaintext of the segment it is decoding.
    Run(Ahead),
    /// How the segment's decoding ended: cleanly at the segment's end, or not.
    End(StreamEnd),
}

/// The segments one decoding thread of [`FrameStream::run_ahead`] takes, and its channels.
struct Lane<'a> {
    start: u64,
    segment_ends: &'a [u64],
    /// Its first segment, then every `step`-th.
    first: usize,
    step: usize,
    sender: std::sync::mpsc::SyncSender<Decoded>,
    /// Runs the consumer is done with, to be filled again.
    recycled: std::sync::mpsc::Receiver<Ahead>,
}

/// Decoder contexts kept per thread for the next read. Creating one zeroes over 100 KiB of
/// tables, which would dominate reading a short log; every run starts with `reinit`.
const SPARE_DECODERS_PER_THREAD: usize = 2;

/// A context that grew past this (its window buffers follow the largest frame it decoded) is
/// freed rather than kept, so idle threads never hold large windows.
const SPARE_DECODER_MAX_BYTES: usize = 4 << 20;

fn new_context() -> io::Result<DCtx<'static>> {
    DCtx::try_create().ok_or_else(|| io::Error::other("zstd could not allocate a decoder context"))
}

/// A decoder context with its buffers, kept for the next stream on the same thread.
struct Spare {
    context: DCtx<'static>,
    input: Vec<u8>,
    output: Vec<u8>,
}

thread_local! {
    static SPARE_DECODERS: std::cell::RefCell<Vec<Spare>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Decodes frames from a source with one reused decoder context and bounded buffers.
pub(crate) struct FrameStream<'s> {
    source: &'s dyn ByteSource,
    /// Always present; taken only when the stream is dropped.
    context: Option<DCtx<'static>>,
    input: Vec<u8>,
    output: Vec<u8>,
}

impl Drop for FrameStream<'_> {
    fn drop(&mut self) {
        // A context left mid-frame is reset by the next run's `reinit`.
        let Some(context) = self.context.take() else { return };
        if context.sizeof() > SPARE_DECODER_MAX_BYTES {
            return;
        }
        let spare = Spare { context, input: std::mem::take(&mut self.input), output: std::mem::take(&mut self.output) };
        let _ = SPARE_DECODERS.try_with(|spares| {
            let mut spares = spares.borrow_mut();
            if spares.len() < SPARE_DECODERS_PER_THREAD {
                spares.push(spare);
            }
        });
    }
}

impl<'s> FrameStream<'s> {
    /// A stream whose buffers fit `expected` compressed bytes, up to the usual chunk sizes.
    pub(crate) fn new(source: &'s dyn ByteSource, expected: u64) -> io::Result<FrameStream<'s>> {
        let input_len = usize::try_from(expected).unwrap_or(usize::MAX).clamp(1, INPUT_CHUNK);
        let output_len = OUTPUT_CHUNK.min(input_len.saturating_mul(8).max(4 << 10));
        let spare = SPARE_DECODERS.try_with(|spares| spares.borrow_mut().pop()).ok().flatten();
        let Spare { context, mut input, mut output } = match spare {
            Some(spare) => spare,
            None => Spare { context: new_context()?, input: Vec::new(), output: Vec::new() },
        };
        input.resize(input_len, 0);
        output.resize(output_len, 0);
        Ok(FrameStream { source, context: Some(context), input, output })
    }

    /// [`FrameStream::run`] over the segments a walk cut (see [`walk_segments`]: the end of
    /// each, the first starting at `start`), decompressed on helper threads so that it overlaps
    /// with `on_piece`, which runs on the caller's thread. Frames are independent: given more
    /// than one decoder (`decoders`, at most [`MAX_DECODERS`]), they take the segments in turn,
    /// each with its own context, and the caller takes their plaintext back in segment order, so
    /// `on_piece` sees what one [`FrameStream::run`] would show it, up to the first segment that
    /// does not decode cleanly, whose end is the answer. (A decoder never reads past its segment:
    /// an I/O error there is not met when an earlier frame already failed, where one pass may
    /// have read on into it.) Memory stays bounded: the channels hold [`AHEAD_DEPTH`] plaintext
    /// runs in all, each decoder fills one more and the caller holds one, and they are reused.
    pub(crate) fn run_ahead(
        &mut self,
        start: u64,
        segment_ends: &[u64],
        decoders: usize,
        path: &Path,
        cancel: &CancellationToken,
        on_piece: &mut dyn FnMut(Piece<'_>) -> Result<()>,
    ) -> Result<StreamEnd> {
        #[cfg(test)]
        RUN_AHEAD_CALLS.with(|calls| calls.set(calls.get() + 1));
        let end = segment_ends.last().copied().unwrap_or(start);
        let n_decoders = decoders.min(MAX_DECODERS).min(segment_ends.len()).max(1);
        let mut others = (1..n_decoders)
            .map(|_| FrameStream::new(self.source, end - start))
            .collect::<io::Result<Vec<_>>>()
            .map_err(|error| PersistenceError::io(path, error))?;
        let decoded = std::thread::scope(|scope| {
            let mut receivers = Vec::with_capacity(n_decoders);
            let mut recycles = Vec::with_capacity(n_decoders);
            let mut decoding = Vec::with_capacity(n_decoders);
            for (first, stream) in std::iter::once(&mut *self).chain(others.iter_mut()).enumerate() {
                let (sender, receiver) = std::sync::mpsc::sync_channel::<Decoded>((AHEAD_DEPTH / n_decoders).max(1));
                let (recycle, recycled) = std::sync::mpsc::channel::<Ahead>();
                let lane = Lane { start, segment_ends, first, step: n_decoders, sender, recycled };
                match spawn_helper(scope, move || stream.decode_segments(lane, path, cancel)) {
                    Ok(handle) => decoding.push(handle),
                    Err(error) => {
                        // Nothing reached `on_piece` yet: the decoders that started stop at their
                        // next send, and this thread decodes the whole range itself.
                        tracing::debug!(%error, "no thread to decompress ahead on; decoding on the reading thread");
                        drop(receivers);
                        for handle in decoding {
                            if let Err(panic) = handle.join() {
                                std::panic::resume_unwind(panic);
                            }
                        }
                        return None;
                    }
                }
                receivers.push(receiver);
                recycles.push(recycle);
            }
            let mut outcome = Ok(StreamEnd::Exhausted { frame_start: end });
            // The decoder that stopped before its segment was done: its error is the answer.
            let mut stopped = None;
            'segments: for (index, &segment_end) in segment_ends.iter().enumerate() {
                let decoder = index % n_decoders;
                loop {
                    match receivers[decoder].recv() {
                        Ok(Decoded::Run(run)) => {
                            let step = run.deliver(on_piece);
                            let _ = recycles[decoder].send(run);
                            if let Err(error) = step {
                                outcome = Err(error);
                                break 'segments;
                            }
                        }
                        Ok(Decoded::End(ended)) if ended == (StreamEnd::Exhausted { frame_start: segment_end }) => {
                            #[cfg(test)]
                            if decoder > 0 {
                                SEGMENTS_FROM_OTHER_DECODERS.with(|taken| taken.set(taken.get() + 1));
                            }
                            break;
                        }
                        Ok(Decoded::End(ended)) => {
                            outcome = Ok(ended);
                            break 'segments;
                        }
                        Err(_) => {
                            stopped = Some(decoder);
                            break 'segments;
                        }
                    }
                }
            }
            // Dropping the receivers makes each decoder's next send fail, which stops it. What
            // a decoder met past the segment that ended the read is not this read's answer.
            drop(receivers);
            for (decoder, handle) in decoding.into_iter().enumerate() {
                let decoded = handle.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic));
                if stopped == Some(decoder) {
                    // Invariant: a decoder sends an end for each of its segments unless it fails.
                    outcome = Err(decoded.expect_err("a decoder stops early only on an error"));
                }
            }
            Some(outcome)
        });
        match decoded {
            Some(outcome) => outcome,
            None => self.run(start, end, path, cancel, on_piece),
        }
    }

    /// One decoding thread of [`FrameStream::run_ahead`]: decodes its segments in turn, sending
    /// each one's plaintext in runs and then how it ended; stops after a segment that did not
    /// end cleanly, or once the consumer is gone.
    fn decode_segments(&mut self, lane: Lane<'_>, path: &Path, cancel: &CancellationToken) -> Result<()> {
        let Lane { start, segment_ends, first, step, sender, recycled } = lane;
        let fresh = || {
            let mut run = recycled.try_recv().unwrap_or_default();
            run.bytes.clear();
            run.frame_ends.clear();
            run
        };
        // The consumer stopped; its own error is the one reported.
        let gone = |_| PersistenceError::Cancelled;
        for index in (first..segment_ends.len()).step_by(step) {
            let segment_start = if index == 0 { start } else { segment_ends[index - 1] };
            let mut run = fresh();
            let ended = self.run(segment_start, segment_ends[index], path, cancel, &mut |piece| {
                match piece {
                    Piece::Plaintext(bytes) => run.bytes.extend_from_slice(bytes),
                    Piece::FrameEnd { end } => run.frame_ends.push((run.bytes.len(), end)),
                }
                if run.bytes.len() >= AHEAD_RUN_BYTES {
                    sender.send(Decoded::Run(std::mem::replace(&mut run, fresh()))).map_err(gone)?;
                }
                Ok(())
            })?;
            // What the decoder produced before it stopped, failed frame or not, goes first.
            if !run.bytes.is_empty() || !run.frame_ends.is_empty() {
                sender.send(Decoded::Run(run)).map_err(gone)?;
            }
            sender.send(Decoded::End(ended)).map_err(gone)?;
            if ended != (StreamEnd::Exhausted { frame_start: segment_ends[index] }) {
                break;
            }
        }
        Ok(())
    }

    /// Decodes the frames in `[start, end)`, handing plaintext and frame ends to `on_piece`.
    /// Checksums are verified at each frame end. Cancellation is checked between reads.
    pub(crate) fn run(
        &mut self,
        start: u64,
        end: u64,
        path: &Path,
        cancel: &CancellationToken,
        on_piece: &mut dyn FnMut(Piece<'_>) -> Result<()>,
    ) -> Result<StreamEnd> {
        // Invariant: `context` is only taken by `Drop`, after which no method runs.
        let context = self.context.as_mut().expect("a stream holds its context until it is dropped");
        let mut decoder = Decoder::with_context(context);
        decoder.reinit().map_err(|error| PersistenceError::io(path, error))?;
        let mut position = start;
        let mut frame_start = start;
        while position < end {
            if cancel.is_cancelled() {
                return Err(PersistenceError::Cancelled);
            }
            let want = usize::try_from(end - position).unwrap_or(usize::MAX).min(self.input.len());
            let got = read_full(self.source, position, &mut self.input[..want])
                .map_err(|error| PersistenceError::io(path, error))?;
            if got == 0 {
                return Err(PersistenceError::io(
                    path,
                    io::Error::new(io::ErrorKind::UnexpectedEof, "the log shrank while it was being read"),
                ));
            }
            let mut input = InBuffer::around(&self.input[..got]);
            loop {
                let consumed_before = input.pos();
                let mut output = OutBuffer::around(&mut self.output[..]);
                let hint = match decoder.run(&mut input, &mut output) {
                    Ok(hint) => hint,
                    Err(_) => return Ok(StreamEnd::Failed { frame_start }),
                };
                let produced = output.pos();
                if produced > 0 {
                    on_piece(Piece::Plaintext(&self.output[..produced]))?;
                }
                if hint == 0 {
                    let frame_end = position + input.pos() as u64;
                    on_piece(Piece::FrameEnd { end: frame_end })?;
                    frame_start = frame_end;
                }
                let output_full = produced == self.output.len();
                if input.pos() == got && !output_full {
                    break;
                }
                if input.pos() == consumed_before && produced == 0 {
                    // No progress with input left and room for output: the data is invalid.
                    return Ok(StreamEnd::Failed { frame_start });
                }
            }
            position += got as u64;
        }
        Ok(StreamEnd::Exhausted { frame_start })
    }
}
