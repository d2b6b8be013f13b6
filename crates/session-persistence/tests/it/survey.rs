//! `survey`: every log with its own status, where `list` would skip or fail as a whole.

use std::fs;

use session_persistence::{Backend, Compression, CorruptKind, PersistenceError};
use tokio_util::sync::CancellationToken;

use crate::{ENCODINGS, fixture_copy, open};

#[test]
fn a_damaged_header_is_reported_without_hiding_the_other_logs() {
    for compression in ENCODINGS {
        let (_guard, root) = fixture_copy(compression);
        let project = root.join("--srv-agents-demo--");
        // A session directory whose log starts with garbage, and one whose log is empty.
        fs::create_dir_all(project.join("s-junk")).unwrap();
        fs::write(project.join("s-junk").join(compression.file_name()), b"not a header\n{}\n").unwrap();
        let store = open(&root, compression);
        // `list` lists the healthy logs and reports the junk one as its own fault: a raw junk
        // header (which the reference skips) and a zstd one that is not a frame at all (which
        // fails the reference's whole listing) alike.
        let listing = store.list(&CancellationToken::new()).unwrap();
        assert_eq!(listing.headers.len(), 6, "{compression:?}");
        assert_eq!(listing.faults.len(), 1, "{compression:?}");
        assert_eq!(listing.faults[0].id.as_str(), "s-junk");
        assert!(matches!(listing.faults[0].error, PersistenceError::Corrupt { .. }), "{:?}", listing.faults[0]);

        let survey = store.survey(&CancellationToken::new()).unwrap();
        assert_eq!(survey.len(), 7, "{compression:?}: survey reports every log");
        let healthy = survey.iter().filter(|entry| entry.header.is_ok()).count();
        assert_eq!(healthy, 6);
        let junk = survey.iter().find(|entry| entry.id.as_str() == "s-junk").expect("the junk log is reported");
        assert!(junk.path.as_ref().is_some_and(|path| path.ends_with(compression.file_name())));
        match &junk.header {
            Err(PersistenceError::Corrupt { kind: CorruptKind::Header | CorruptKind::Frame, .. }) => {}
            other => panic!("{compression:?}: {other:?}"),
        }
    }
}

#[test]
fn the_other_encoding_is_reported_per_log() {
    let (_guard, root) = fixture_copy(Compression::Zstd);
    let stray = root.join("--srv-agents-demo--").join("s-parent").join(Compression::None.file_name());
    fs::write(&stray, b"").unwrap();
    let store = open(&root, Compression::Zstd);
    let survey = store.survey(&CancellationToken::new()).unwrap();
    let parent = survey.iter().find(|entry| entry.id.as_str() == "s-parent").unwrap();
    assert!(matches!(parent.header, Err(PersistenceError::FormatUnsupported { .. })), "{:?}", parent.header);
    assert_eq!(survey.iter().filter(|entry| entry.header.is_ok()).count(), 5);
}

#[test]
fn hidden_directories_of_the_root_are_not_projects() {
    let (_guard, root) = fixture_copy(Compression::Zstd);
    let hidden = root.join(".projection-cache").join("records");
    fs::create_dir_all(hidden.join("s-x")).unwrap();
    fs::write(hidden.join("s-x").join(Compression::Zstd.file_name()), b"junk").unwrap();
    let store = open(&root, Compression::Zstd);
    assert_eq!(store.list(&CancellationToken::new()).unwrap(), store.list(&CancellationToken::new()).unwrap());
    assert_eq!(store.list(&CancellationToken::new()).unwrap().headers.len(), 6);
    assert_eq!(store.survey(&CancellationToken::new()).unwrap().len(), 6);
}
