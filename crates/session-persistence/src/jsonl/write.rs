//! Writing logs: atomic materialization (temp file, fsync, `link`, directory fsync), appends
//! (one write and one fsync, rolled back to the prior size on failure), repairs, and the
//! poisoning of a writer whose file can no longer be trusted.

use std::{
    fs::{self, File, OpenOptions},
    io::{self, Write},
    os::unix::fs::OpenOptionsExt,
    path::Path,
    sync::Arc,
};

use session_core::{SessionEvent, SessionHeader, SessionId};
use tokio_util::sync::CancellationToken;

use super::{
    JsonlStore,
    files::{ensure_dir, exists, io_error, open_regular, random_suffix, sync_dir},
};
use crate::{
    backend::TornTail,
    error::{PersistenceError, Result},
    format::{FrameEncoder, encode_batch, encode_header_line},
};

fn already_materialized(id: &SessionId) -> PersistenceError {
    PersistenceError::collision(
        id,
        format!("refusing to materialize \"{id}\": a log already exists on disk (load/resume it instead)"),
    )
}

/// Opens the existing regular log at `path` with `options`; a log that vanished is an error.
fn open_log(path: &Path, options: &mut OpenOptions) -> Result<File> {
    match open_regular(path, options)? {
        Some((file, _)) => Ok(file),
        None => Err(PersistenceError::io(path, io::Error::from(io::ErrorKind::NotFound))),
    }
}

impl JsonlStore {
    /// Fails unless this handle may write: it holds the store's lock, and the root is still the
    /// directory it locked.
    fn check_writable(&self) -> Result<()> {
        match &self.lock {
            None => {
                Err(PersistenceError::invalid_input(format!("session store {} is open read-only", self.root.display())))
            }
            Some(lock) => lock.check(),
        }
    }

    fn check_poisoned(&self, id: &SessionId) -> Result<()> {
        match self.poisoned.lock().get(id) {
            Some(message) => Err(PersistenceError::Poisoned { message: message.clone() }),
            None => Ok(()),
        }
    }

    fn poison(&self, id: &SessionId, message: String) {
        self.poisoned.lock().entry(id.clone()).or_insert(message);
    }

    fn encoder(&self) -> Result<FrameEncoder> {
        match self.encoders.lock().pop() {
            Some(encoder) => Ok(encoder),
            None => FrameEncoder::new().map_err(io_error(&self.root)),
        }
    }

    /// One durable batch in the store's encoding: lines, or one frame of them.
    fn encode_events(&self, events: &[&SessionEvent], path: &Path) -> Result<Vec<u8>> {
        let mut lines = Vec::new();
        encode_batch(events, self.pack_chunks, &mut lines)?;
        self.encode_text(lines, path)
    }

    fn encode_text(&self, text: Vec<u8>, path: &Path) -> Result<Vec<u8>> {
        match self.compression {
            crate::Compression::None => Ok(text),
            crate::Compression::Zstd => {
                let mut encoder = self.encoder()?;
                let frame = encoder.encode(&text).map_err(io_error(path));
                self.encoders.lock().push(encoder);
                frame
            }
        }
    }

    /// [`Backend::append_batch`](crate::Backend::append_batch) of the JSONL store.
    pub(super) fn append_events(
        &self,
        header: &SessionHeader,
        events: &[Arc<SessionEvent>],
        materialized: bool,
    ) -> Result<()> {
        self.check_writable()?;
        self.check_poisoned(&header.id)?;
        let path = self.log_path(header)?;
        let events: Vec<&SessionEvent> = events.iter().map(|event| &**event).collect();
        if !materialized {
            return self.materialize(header, &events, &path);
        }
        if events.is_empty() {
            return Ok(());
        }
        let bytes = self.encode_events(&events, &path)?;
        self.append_bytes(&header.id, &path, &bytes)
    }

    /// [`Backend::commit_repair`](crate::Backend::commit_repair) of the JSONL store.
    pub(super) fn repair(
        &self,
        header: &SessionHeader,
        torn: Option<&TornTail>,
        closers: &[SessionEvent],
    ) -> Result<()> {
        self.check_writable()?;
        self.check_poisoned(&header.id)?;
        let path = self.log_path(header)?;
        if let Some(torn) = torn {
            let file = open_log(&path, OpenOptions::new().write(true))?;
            let len = file.metadata().map_err(io_error(&path))?.len();
            if torn.truncate_to > len {
                // This store's lock makes it the only writer: the file shrank under it.
                return Err(PersistenceError::inconsistent(
                    &header.id,
                    format!(
                        "stale torn tail for session \"{}\": cannot cut \"{}\" to {} bytes, it holds {len}",
                        header.id,
                        path.display(),
                        torn.truncate_to
                    ),
                ));
            }
            self.hooks.opened(&path, len);
            file.set_len(torn.truncate_to).map_err(io_error(&path))?;
            if let Err(error) = self.hooks.fsync().and_then(|()| file.sync_all()) {
                self.poison(&header.id, format!("an fsync of \"{}\" failed: {error}", path.display()));
                return Err(PersistenceError::io(&path, error));
            }
            self.hooks.synced(&path, torn.truncate_to);
        }
        let events: Vec<&SessionEvent> =
            torn.into_iter().flat_map(|torn| torn.recovered.iter()).chain(closers.iter()).collect();
        if events.is_empty() {
            return Ok(());
        }
        let bytes = self.encode_events(&events, &path)?;
        self.append_bytes(&header.id, &path, &bytes)
    }

    /// Publishes a new log holding the header and the first batch, atomically.
    fn materialize(&self, header: &SessionHeader, events: &[&SessionEvent], path: &Path) -> Result<()> {
        header.validate(&header.id).map_err(PersistenceError::invalid_header)?;
        // Invariant: `log_path` builds `<root>/<project>/<segment>/<file name>`, so a log path has a
        // session directory, a project directory above it, and a file name.
        let session_dir = path.parent().expect("a log path has a session directory");
        let project_dir = session_dir.parent().expect("a session directory has a project directory");

        let mut line = encode_header_line(header).into_bytes();
        line.push(b'\n');
        let mut content = self.encode_text(line, path)?;
        if !events.is_empty() {
            content.extend(self.encode_events(events, path)?);
        }

        if let Some(existing) = self.find_log(&header.id, &CancellationToken::new())? {
            return Err(if existing == path {
                already_materialized(&header.id)
            } else {
                PersistenceError::collision(
                    &header.id,
                    format!(
                        "session \"{}\" already has a persisted log at \"{}\"; load/resume it instead of creating",
                        header.id,
                        existing.display()
                    ),
                )
            });
        }
        let before = super::kept::before_creating(&self.root, project_dir);
        ensure_dir(&self.root)?;
        ensure_dir(project_dir)?;
        ensure_dir(session_dir)?;
        self.reject_opposite(session_dir)?;
        if exists(path)? {
            return Err(already_materialized(&header.id));
        }

        let file_name = path.file_name().expect("a log path has a file name").to_string_lossy();
        let temp = session_dir.join(format!("{file_name}.{}.tmp", random_suffix()));
        let written = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&temp)
            .and_then(|mut file| self.write_all(&mut file, &content).and_then(|()| self.sync_new(&file)));
        if let Err(error) = written {
            let _ = fs::remove_file(&temp);
            return Err(PersistenceError::io(&temp, error));
        }
        // `link` fails if the log appeared meanwhile; `rename` would silently replace it.
        if let Err(error) = fs::hard_link(&temp, path) {
            let _ = fs::remove_file(&temp);
            return Err(match error.kind() {
                io::ErrorKind::AlreadyExists => already_materialized(&header.id),
                _ => PersistenceError::io(path, error),
            });
        }
        self.hooks.linked(path, content.len() as u64);
        let synced = self.hooks.dir_fsync().map_err(io_error(session_dir)).and_then(|()| sync_dir(session_dir));
        // The log is published; the temp name is only a second link to it.
        let _ = fs::remove_file(&temp);
        if let Err(error) = synced {
            self.poison(&header.id, format!("the new log \"{}\" may not be durable: {error}", path.display()));
            return Err(error);
        }
        self.hooks.dir_synced(session_dir);
        self.index.lock().insert(header.id.clone(), path.to_owned());
        self.kept_created(super::kept::Created::new(header, before));
        Ok(())
    }

    /// Appends `bytes` and fsyncs. On failure the file is cut back to its prior size; a failed
    /// fsync or a failed rollback poisons the session's writer.
    fn append_bytes(&self, id: &SessionId, path: &Path, bytes: &[u8]) -> Result<()> {
        let mut file = open_log(path, OpenOptions::new().append(true))?;
        let before = file.metadata().map_err(io_error(path))?.len();
        self.hooks.opened(path, before);
        let written = self.write_all(&mut file, bytes);
        let (error, fsync_failed) = match written {
            Err(error) => (error, false),
            Ok(()) => match self.hooks.fsync().and_then(|()| file.sync_data()) {
                Ok(()) => {
                    self.hooks.synced(path, before + bytes.len() as u64);
                    return Ok(());
                }
                Err(error) => (error, true),
            },
        };
        match self.roll_back(&file, before) {
            Ok(()) => {
                self.hooks.synced(path, before);
                if fsync_failed {
                    self.poison(id, format!("an fsync of \"{}\" failed: {error}", path.display()));
                }
                Err(PersistenceError::io(path, error))
            }
            Err(rollback_error) => {
                let message = format!(
                    "failed to roll back append to \"{}\": {error}; the rollback failed too: {rollback_error}",
                    path.display()
                );
                self.poison(id, message.clone());
                Err(PersistenceError::Poisoned { message })
            }
        }
    }

    /// Writes all of `bytes`, unless a simulated disk tears the write.
    fn write_all(&self, file: &mut File, bytes: &[u8]) -> io::Result<()> {
        match self.hooks.tear(bytes.len()) {
            None => file.write_all(bytes),
            Some(at) => file
                .write_all(&bytes[..at])
                .and(Err(io::Error::other("injected write failure (simulated disk): the write was torn"))),
        }
    }

    /// Fsyncs a new log's temp file, data and metadata.
    fn sync_new(&self, file: &File) -> io::Result<()> {
        self.hooks.fsync()?;
        file.sync_all()
    }

    fn roll_back(&self, file: &File, size: u64) -> io::Result<()> {
        self.hooks.rollback()?;
        file.set_len(size)?;
        file.sync_all()
    }
}
