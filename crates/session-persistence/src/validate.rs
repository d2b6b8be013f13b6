//! Read-side validation shared by every cold read: the events a backend decodes are checked
//! once, as they stream past, and the crash closers are computed on the way.

use std::{collections::HashSet, path::PathBuf, sync::Arc};

use session_core::{RepairScan, SessionEvent, SessionHeader, SessionId, SurfaceState, messages};
use smol_str::SmolStr;

use crate::{
    backend::{Backend, ScanSink},
    error::{CorruptKind, Location, PersistenceError, Result},
};

/// The event types a reader accepts without `ignorable: true`.
#[derive(Debug, Clone)]
pub struct KnownTypes(Arc<HashSet<SmolStr>>);

impl KnownTypes {
    /// The reference vocabulary plus `extra`.
    pub fn with_extra(extra: impl IntoIterator<Item = impl Into<SmolStr>>) -> KnownTypes {
        let mut set: HashSet<SmolStr> = session_core::KNOWN_SESSION_EVENT_TYPES.iter().map(SmolStr::new).collect();
        set.extend(extra.into_iter().map(Into::into));
        KnownTypes(Arc::new(set))
    }

    pub fn contains(&self, kind: &str) -> bool {
        self.0.contains(kind)
    }
}

impl Default for KnownTypes {
    fn default() -> KnownTypes {
        KnownTypes::with_extra(std::iter::empty::<SmolStr>())
    }
}

/// Validates each event and forwards it to `inner`; tracks what repair needs.
pub(crate) struct ValidatingSink<'a> {
    id: SessionId,
    backend: &'a dyn Backend,
    path: Option<PathBuf>,
    known: &'a KnownTypes,
    surface: SurfaceState,
    repair: RepairScan,
    last: Option<(u64, i64)>,
    pub(crate) inner: &'a mut dyn ScanSink,
}

impl<'a> ValidatingSink<'a> {
    pub(crate) fn new(
        id: SessionId,
        backend: &'a dyn Backend,
        known: &'a KnownTypes,
        inner: &'a mut dyn ScanSink,
    ) -> Self {
        ValidatingSink {
            id,
            backend,
            path: None,
            known,
            surface: SurfaceState::default(),
            repair: RepairScan::default(),
            last: None,
            inner,
        }
    }

    fn location(&self) -> Location {
        match &self.path {
            Some(path) => Location::file(path.clone()),
            None => Location::Session { id: self.id.clone() },
        }
    }

    fn unsupported(&self, message: String) -> PersistenceError {
        let message = match &self.path {
            Some(path) => format!("{message} (raw log: {})", path.display()),
            None => message,
        };
        PersistenceError::FormatUnsupported { id: self.id.clone(), message, location: Some(self.location()) }
    }

    fn invalid(&self, detail: String) -> PersistenceError {
        PersistenceError::corrupt(
            CorruptKind::Validation,
            self.location(),
            format!("stored session \"{}\" failed validation: {detail}", self.id),
        )
    }

    fn legacy(&self, shape: &str, seq: u64) -> PersistenceError {
        self.unsupported(format!(
            "session \"{}\" contains a {shape} event at seq {seq}; this build does not import legacy logs",
            self.id
        ))
    }

    /// The closers that balance what streamed past, continuing its seqs.
    pub(crate) fn closers(&self) -> Vec<SessionEvent> {
        match self.last {
            Some((seq, time)) => self.repair.closers(seq, time),
            None => Vec::new(),
        }
    }

    fn check(&mut self, event: &SessionEvent) -> Result<()> {
        let id = &self.id;
        let seq = event.seq;
        match event.kind.as_str() {
            "request/header-delta" | "mode/set" => {
                return Err(self.unsupported(format!(
                    "session \"{id}\" contains unsupported legacy {} event at seq {seq}",
                    event.kind
                )));
            }
            _ => {}
        }
        // A legacy shape is refused as unsupported rather than reported as corrupt. Messages in the
        // current shape are never legacy, so their payloads are only examined for legacy shapes
        // when the current checks fail; other kinds carry small payloads.
        let is_message = session_core::is_surface_eligible(&event.kind);
        if !is_message && let Some(shape) = messages::legacy_shape(event) {
            return Err(self.legacy(shape, seq));
        }
        if !event.ignorable && !self.known.contains(&event.kind) {
            return Err(self.unsupported(format!(
                "session \"{id}\" contains event type \"{}\" (seq {seq}) unknown to this harness and not marked ignorable; refusing to interpret the log — it was likely written by a newer harness",
                event.kind
            )));
        }
        if let Err(err) = messages::check_message_shape(event) {
            return Err(match messages::legacy_shape(event) {
                Some(shape) => self.legacy(shape, seq),
                None => self.invalid(err),
            });
        }
        // The surface rules include the marker rules (`check_markers`).
        event.check_legacy().map_err(|err| self.invalid(err))?;
        self.surface.apply(event).map_err(|err| self.invalid(err))?;
        Ok(())
    }
}

impl ScanSink for ValidatingSink<'_> {
    fn header(&mut self, header: &Arc<SessionHeader>) -> Result<()> {
        if header.id != self.id {
            return Err(PersistenceError::corrupt(
                CorruptKind::Identity,
                self.location(),
                format!(
                    "stored session identity mismatch: requested \"{}\", header contains \"{}\"",
                    self.id, header.id
                ),
            ));
        }
        self.path = self.backend.locate(header);
        header.validate(&self.id).map_err(|err| self.invalid(err.message))?;
        self.inner.header(header)
    }

    fn restart(&mut self) -> bool {
        self.surface = SurfaceState::default();
        self.repair = RepairScan::default();
        self.last = None;
        self.inner.restart()
    }

    fn event(&mut self, event: Arc<SessionEvent>) -> Result<()> {
        self.check(&event)?;
        self.repair.observe(&event);
        self.last = Some((event.seq, event.time));
        self.inner.event(event)
    }
}
