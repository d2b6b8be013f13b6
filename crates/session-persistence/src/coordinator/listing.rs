//! Listings: every stored header, a parent's family, a page of the newest-first order, and one
//! stored header, each straight from the backend; a log a listing cannot list is reported once.

use session_core::SessionId;
use tokio_util::sync::CancellationToken;

use super::state::{Inner, blocking, check_cancel};
use crate::{
    backend::{HeaderPage, Listing, PageRequest, StoredHeader},
    error::Result,
    watch::SessionPosition,
};

impl Inner {
    pub(super) async fn list_snapshots(&self, cancel: &CancellationToken) -> Result<Listing> {
        check_cancel(cancel)?;
        let token = cancel.clone();
        let mut listed = blocking(&self.backend, move |backend| backend.list(&token)).await?;
        check_cancel(cancel)?;
        listed.sort();
        self.faults.report(&listed.faults);
        Ok(listed)
    }

    pub(super) async fn list_children(&self, parent: &SessionId, cancel: &CancellationToken) -> Result<Listing> {
        check_cancel(cancel)?;
        let (parent, token) = (parent.clone(), cancel.clone());
        let mut listed = blocking(&self.backend, move |backend| backend.list_children(&parent, &token)).await?;
        check_cancel(cancel)?;
        listed.sort();
        self.faults.report(&listed.faults);
        Ok(listed)
    }

    pub(super) async fn list_page(&self, request: &PageRequest, cancel: &CancellationToken) -> Result<HeaderPage> {
        check_cancel(cancel)?;
        let (request, token) = (request.clone(), cancel.clone());
        let page = blocking(&self.backend, move |backend| backend.list_page(&request, &token)).await?;
        check_cancel(cancel)?;
        self.faults.report(&page.faults);
        Ok(page)
    }

    pub(super) async fn stored_header(
        &self,
        id: &SessionId,
        cancel: &CancellationToken,
    ) -> Result<Option<StoredHeader>> {
        check_cancel(cancel)?;
        let (probe, token) = (id.clone(), cancel.clone());
        blocking(&self.backend, move |backend| backend.header(&probe, &token)).await
    }

    pub(super) async fn positions(
        &self,
        ids: &[SessionId],
        cancel: &CancellationToken,
    ) -> Result<Vec<SessionPosition>> {
        check_cancel(cancel)?;
        let (ids, token) = (ids.to_vec(), cancel.clone());
        blocking(&self.backend, move |backend| backend.positions(&ids, &token)).await
    }

    pub(super) async fn created_since(&self, since_ms: u64, cancel: &CancellationToken) -> Result<Listing> {
        check_cancel(cancel)?;
        let token = cancel.clone();
        let mut listed = blocking(&self.backend, move |backend| backend.created_since(since_ms, &token)).await?;
        check_cancel(cancel)?;
        listed.sort();
        Ok(listed)
    }
}
