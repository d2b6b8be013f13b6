//! The listing a writable store keeps, so that a page ([`Backend::list_page`]), a family
//! ([`Backend::list_children`]) and the sessions created since a time
//! ([`Backend::created_since`]) cost their own logs instead of a walk of the store (about a second
//! at 100,000 sessions: a `stat` per log even with every header cached).
//!
//! A writable store holds the store's lock, so every log that appears is this handle's own: it
//! publishes it, then records its header here. What the walk found is kept with the modification
//! times of the root and of every project directory, taken before it walked: a session directory
//! created or removed by anything else moves its project directory's time, a project directory
//! its root's, and the next use walks again. A creation of this handle moves them too, so it
//! records the times before and after it, and the kept times move on only if they were the
//! "before" ones (otherwise the next use walks). Every answer then reads the header of each log
//! it names again (a `stat` through the header cache): a log gone or changed (a file another
//! program replaced inside a session directory) walks again and answers from the new walk. A
//! read-only handle keeps nothing: another process writes the store it reads, and one-off
//! commands walk once anyway.
//!
//! [`Backend::list_page`]: crate::Backend::list_page
//! [`Backend::list_children`]: crate::Backend::list_children
//! [`Backend::created_since`]: crate::Backend::created_since

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    fs,
    os::unix::fs::MetadataExt,
    path::{Path, PathBuf},
    sync::Arc,
};

use session_core::{SessionHeader, SessionId};
use tokio_util::sync::CancellationToken;

use super::{JsonlStore, discovery::duplicate};
use crate::{
    backend::{HeaderPage, Listing, LogFault, PageKey, PageRequest, StoredHeader},
    error::Result,
};

/// A directory's modification time (seconds, nanoseconds); `None` when it cannot be read.
type Stamp = Option<(i64, i64)>;

fn stamp(path: &Path) -> Stamp {
    fs::symlink_metadata(path).ok().map(|metadata| (metadata.mtime(), metadata.mtime_nsec()))
}

/// A log this handle published: its header, and its directories' times around the publication.
#[derive(Debug)]
pub(super) struct Created {
    header: Arc<SessionHeader>,
    stamps: Vec<(PathBuf, Stamp, Stamp)>,
}

/// The root's and a project directory's times, taken before a creation in `project`.
pub(super) fn before_creating(root: &Path, project: &Path) -> Vec<(PathBuf, Stamp)> {
    [root, project].into_iter().map(|dir| (dir.to_owned(), stamp(dir))).collect()
}

impl Created {
    /// The creation of `header`'s log, the directories' times now and as they were `before`.
    pub(super) fn new(header: &SessionHeader, before: Vec<(PathBuf, Stamp)>) -> Created {
        let stamps = before.into_iter().map(|(dir, was)| (dir.clone(), was, stamp(&dir))).collect();
        Created { header: Arc::new(header.clone()), stamps }
    }
}

/// The kept listing. See the module documentation.
#[derive(Debug, Default)]
pub(super) struct Kept {
    /// The root and each project directory, with the times the listing is current for.
    stamps: HashMap<PathBuf, Stamp>,
    order: BTreeMap<PageKey, Arc<SessionHeader>>,
    by_id: HashMap<SessionId, Arc<SessionHeader>>,
    /// Each `parentSession` with the ids naming it (any origin).
    children: HashMap<SessionId, BTreeSet<SessionId>>,
    /// Ids stored twice, each copy with its path and header: the walk's faults that families keep.
    duplicates: Vec<(SessionId, PathBuf, Arc<SessionHeader>)>,
}

impl Kept {
    /// What a walk found, current for `stamps` (taken before it).
    fn of(listing: &Listing, stamps: HashMap<PathBuf, Stamp>) -> Kept {
        let mut kept = Kept { stamps, ..Kept::default() };
        for stored in &listing.headers {
            kept.insert(Arc::clone(&stored.header));
        }
        for fault in &listing.faults {
            if let (Some(header), Some(path)) = (&fault.header, &fault.path) {
                kept.duplicates.push((fault.id.clone(), path.clone(), Arc::clone(header)));
            }
        }
        kept
    }

    fn is_current(&self) -> bool {
        self.stamps.iter().all(|(dir, kept)| stamp(dir) == *kept)
    }

    fn insert(&mut self, header: Arc<SessionHeader>) {
        if let Some(parent) = &header.parent_session {
            self.children.entry(parent.clone()).or_default().insert(header.id.clone());
        }
        self.order.insert(PageKey::of(&header), Arc::clone(&header));
        self.by_id.insert(header.id.clone(), header);
    }

    /// Records this handle's creation: the header, and each directory's time moved on if the
    /// kept one was the time before it (a directory new to the listing is taken as it is now
    /// if the root's time moved on the same way).
    fn created(&mut self, created: Created) {
        if !self.by_id.contains_key(&created.header.id) {
            self.insert(created.header);
        }
        for (dir, before, after) in created.stamps {
            match self.stamps.get_mut(&dir) {
                Some(kept) if *kept == before => *kept = after,
                Some(_) => {}
                None => {
                    self.stamps.insert(dir, after);
                }
            }
        }
    }

    /// The headers a page of `request` is cut from: the first `limit + 1` of its range that it
    /// admits, and the subagent children (of the request's owner) of each of them.
    fn page(&self, request: &PageRequest) -> Vec<Arc<SessionHeader>> {
        let range = match &request.after {
            None => self.order.range(..),
            Some(after) => self.order.range((std::ops::Bound::Excluded(after.clone()), std::ops::Bound::Unbounded)),
        };
        let rows: Vec<Arc<SessionHeader>> = range
            .map(|(_, header)| header)
            .filter(|header| request.admits(header))
            .take(request.limit.saturating_add(1))
            .cloned()
            .collect();
        let children = rows
            .iter()
            .flat_map(|header| self.children_of(&header.id))
            .filter(|child| child.is_subagent() && (request.owner.is_none() || child.owner == request.owner));
        let mut candidates: Vec<Arc<SessionHeader>> = children.chain(rows.iter().cloned()).collect();
        candidates.sort_by(|a, b| a.id.cmp(&b.id));
        candidates.dedup_by(|a, b| a.id == b.id);
        candidates
    }

    /// The headers and faults a family of `parent` is cut from: `parent`, its children, theirs,
    /// and the copies of ids stored twice.
    fn family(&self, parent: &SessionId) -> (Vec<Arc<SessionHeader>>, Vec<LogFault>) {
        let mut headers: Vec<Arc<SessionHeader>> = self.by_id.get(parent).cloned().into_iter().collect();
        let mut children: Vec<SessionId> = self.children_of(parent).map(|child| child.id.clone()).collect();
        children.extend(
            self.duplicates
                .iter()
                .filter(|(_, _, header)| header.parent_session.as_ref() == Some(parent))
                .map(|d| d.0.clone()),
        );
        for child in &children {
            headers.extend(self.by_id.get(child).cloned());
            headers.extend(self.children_of(child));
        }
        headers.sort_by(|a, b| a.id.cmp(&b.id));
        headers.dedup_by(|a, b| a.id == b.id);
        let faults = self
            .duplicates
            .iter()
            .map(|(id, path, header)| LogFault {
                id: id.clone(),
                path: Some(path.clone()),
                header: Some(Arc::clone(header)),
                error: duplicate(id),
            })
            .collect();
        (headers, faults)
    }

    /// The headers with `created_at >= since`.
    fn created_since(&self, since: u64) -> Vec<Arc<SessionHeader>> {
        self.order.values().take_while(|header| header.created_at >= since).cloned().collect()
    }

    fn children_of(&self, parent: &SessionId) -> impl Iterator<Item = Arc<SessionHeader>> + '_ {
        self.children.get(parent).into_iter().flatten().filter_map(|id| self.by_id.get(id).cloned())
    }
}

/// What an answer needs from the kept listing: headers to read again, and faults as they are.
type Selection = (Vec<Arc<SessionHeader>>, Vec<LogFault>);

impl JsonlStore {
    /// One page: from the kept listing on a writable store, from a walk on a read-only one.
    pub(super) fn kept_page(&self, request: &PageRequest, cancel: &CancellationToken) -> Result<HeaderPage> {
        let Some(listing) = self.kept_listing(cancel, |kept| (kept.page(request), Vec::new()))? else {
            return Ok(HeaderPage::from_listing(self.walk(cancel)?, request));
        };
        Ok(HeaderPage::from_listing(listing, request))
    }

    /// One family, as [`Listing::family_of`] cuts it.
    pub(super) fn kept_family(&self, parent: &SessionId, cancel: &CancellationToken) -> Result<Listing> {
        let listing = match self.kept_listing(cancel, |kept| kept.family(parent))? {
            Some(listing) => listing,
            None => self.walk(cancel)?,
        };
        Ok(listing.family_of(parent))
    }

    /// The sessions created at or after `since_ms`, faults left out.
    pub(super) fn kept_created_since(&self, since_ms: u64, cancel: &CancellationToken) -> Result<Listing> {
        let mut listing = match self.kept_listing(cancel, |kept| (kept.created_since(since_ms), Vec::new()))? {
            Some(listing) => listing,
            None => self.walk(cancel)?,
        };
        listing.headers.retain(|stored| stored.header.created_at >= since_ms);
        listing.faults.clear();
        Ok(listing)
    }

    /// Records a log this handle published (see [`Created`]); taken in by the next answer.
    pub(super) fn kept_created(&self, created: Created) {
        if self.lock.is_some() {
            self.created.lock().push(created);
        }
    }

    /// The listing `select` picks from the kept listing, each header read again: `None` on a
    /// read-only handle. A kept listing that is not current, or that names a log whose header is
    /// gone or changed, is replaced by a new walk's.
    fn kept_listing(&self, cancel: &CancellationToken, select: impl Fn(&Kept) -> Selection) -> Result<Option<Listing>> {
        if self.lock.is_none() {
            return Ok(None);
        }
        let mut slot = self.kept.lock();
        for attempt in 0..2 {
            if let Some(kept) = slot.as_mut() {
                for created in std::mem::take(&mut *self.created.lock()) {
                    kept.created(created);
                }
            }
            let kept = match slot.as_ref() {
                Some(kept) if attempt == 0 && kept.is_current() => kept,
                _ => &*slot.insert(self.walk_kept(cancel)?),
            };
            let (headers, faults) = select(kept);
            if let Some(headers) = self.read_again(&headers, cancel)? {
                let mut listing = Listing { headers, faults };
                listing.sort();
                return Ok(Some(listing));
            }
        }
        // Twice a log changed under the answer: answer from a walk of its own.
        Ok(None)
    }

    /// A walk, with the directories' times taken before it.
    fn walk_kept(&self, cancel: &CancellationToken) -> Result<Kept> {
        let mut stamps: HashMap<PathBuf, Stamp> = HashMap::new();
        stamps.insert(self.root.clone(), stamp(&self.root));
        for project in self.project_dirs()? {
            let was = stamp(&project);
            stamps.insert(project, was);
        }
        // Creations recorded before this walk are in it.
        self.created.lock().clear();
        Ok(Kept::of(&self.walk(cancel)?, stamps))
    }

    /// Each of `headers` as its log holds it now; `None` if one is gone or holds another header.
    fn read_again(
        &self,
        headers: &[Arc<SessionHeader>],
        cancel: &CancellationToken,
    ) -> Result<Option<Vec<StoredHeader>>> {
        let mut read = Vec::with_capacity(headers.len());
        for header in headers {
            match self.log_header(&header.id, cancel) {
                Ok(Some(stored)) if stored.header == *header => read.push(stored),
                Ok(_) => return Ok(None),
                Err(crate::PersistenceError::Cancelled) => return Err(crate::PersistenceError::Cancelled),
                Err(_) => return Ok(None),
            }
        }
        Ok(Some(read))
    }
}

#[cfg(test)]
mod tests;
