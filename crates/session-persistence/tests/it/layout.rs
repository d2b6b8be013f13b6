//! Directory layout and naming, identity binding, and the refusals of foreign layouts.

use std::{fs, io::Write};

use session_persistence::{Backend, Compression, JsonlStore, Listing, PersistenceError, encode_segment, project_key};
use tokio_util::sync::CancellationToken;

use crate::{arcs, config, header, id, open, scan, scan_ok, turn};

/// The ids `listing` lists.
fn listed_ids(listing: &Listing) -> Vec<&str> {
    listing.headers.iter().map(|stored| stored.header.id.as_str()).collect()
}

/// The error of the one fault `listing` reports for `id`.
fn fault_of<'l>(listing: &'l Listing, id: &str) -> &'l PersistenceError {
    let faults: Vec<_> = listing.faults.iter().filter(|fault| fault.id.as_str() == id).collect();
    assert_eq!(faults.len(), 1, "one fault for {id:?} in {listing:?}");
    &faults[0].error
}

fn check_segment(id: &str, expected: &str) {
    assert_eq!(encode_segment(id).unwrap(), expected, "{id:?}");
}

#[test]
fn segment_encoding() {
    check_segment("s-parent", "s-parent");
    check_segment("a/b", "a~002Fb");
    check_segment(".", "~002E");
    check_segment("..", "~002E~002E");
    check_segment("...", "...");
    check_segment("~", "~007E");
    check_segment("A.z_9-", "A.z_9-");
    check_segment("é", "~00E9");
    check_segment("😀", "~D83D~DE00");
    check_segment("a b\0", "a~0020b~0000");
    let error = encode_segment("").unwrap_err();
    assert_eq!(error.to_string(), "cannot encode an empty path segment");
}

#[test]
fn project_keys() {
    for (cwd, key) in [
        ("/Users/qyj/work/x", "--Users-qyj-work-x--"),
        ("C:\\work\\agent", "--C-work-agent--"),
        ("/", "--root--"),
        ("/srv/agents/demo", "--srv-agents-demo--"),
        ("//a//b/", "--a-b---"),
        ("/a b", "--a~0020b--"),
    ] {
        assert_eq!(project_key(cwd).unwrap(), key, "{cwd}");
    }
    let long = format!("/{}", "x".repeat(400));
    let key = project_key(&long).unwrap();
    assert_eq!(key.len(), 255);
    assert_eq!(project_key("").unwrap_err().to_string(), "cannot encode an empty project path");
}

#[test]
fn too_long_ids_are_refused_clearly() {
    assert_eq!(encode_segment(&"a".repeat(255)).unwrap().len(), 255);
    let error = encode_segment(&"a".repeat(256)).unwrap_err();
    assert!(matches!(error, PersistenceError::InvalidInput { .. }));
    assert!(error.to_string().contains("256-byte path component, over the 255-byte limit"), "{error}");
    // 52 escaped units are 260 bytes.
    assert!(encode_segment(&"é".repeat(52)).is_err());

    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path(), Compression::Zstd);
    let long = "x".repeat(300);
    let error = store.append_batch(&header(&long, None), &arcs(&turn(0, 1)), false).unwrap_err();
    assert!(error.to_string().contains("over the 255-byte limit"), "{error}");
    assert!(matches!(scan(&store, &long), Err(PersistenceError::InvalidInput { .. })));
}

#[test]
fn path_traversal_ids_stay_inside_the_root() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    let store = open(&root, Compression::None);
    for session in ["../escape", "..", "/etc/passwd", "a/../../b"] {
        let header = header(session, Some("/../.."));
        store.append_batch(&header, &arcs(&turn(0, 1)), false).unwrap();
        let path = store.locate(&header).unwrap();
        assert!(path.starts_with(&root), "{}", path.display());
        assert_eq!(scan_ok(&store, session).1.len(), 3);
    }
    assert_eq!(store.list(&CancellationToken::new()).unwrap().headers.len(), 4);
}

#[test]
fn flat_layout_is_refused() {
    for compression in crate::ENCODINGS {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path(), compression);
        store.append_batch(&header("ok", Some("/p")), &arcs(&turn(0, 1)), false).unwrap();
        fs::write(dir.path().join("--p--").join(format!("old{}", compression.suffix())), b"x").unwrap();
        let fresh = open_again(dir.path(), compression);
        let listing = fresh.list(&CancellationToken::new()).unwrap();
        assert_eq!(listed_ids(&listing), ["ok"], "the other sessions of the project still list");
        let error = fault_of(&listing, "old");
        assert!(matches!(error, PersistenceError::FormatUnsupported { .. }), "{error:?}");
        assert!(error.to_string().contains("uses the unsupported flat-file layout"), "{error}");
    }
}

/// A second handle on a root that another handle in this process has open: read-only, since the
/// writer holds the lock.
fn open_again(root: &std::path::Path, compression: Compression) -> JsonlStore {
    JsonlStore::open_read_only(config(root, compression)).unwrap()
}

#[test]
fn opposite_encoding_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path(), Compression::Zstd);
    let header = header("mixed", Some("/p"));
    store.append_batch(&header, &arcs(&turn(0, 1)), false).unwrap();
    let raw_twin = store.locate(&header).unwrap().with_file_name("session.jsonl");
    fs::write(&raw_twin, b"{}\n").unwrap();
    for error in [
        scan(&store, "mixed").unwrap_err(),
        store.list(&CancellationToken::new()).unwrap().faults.remove(0).error,
        store.revision(&id("mixed")).unwrap_err(),
        {
            let fresh = dir.path().join("--p--/fresh");
            fs::create_dir_all(&fresh).unwrap();
            fs::write(fresh.join("session.jsonl"), b"").unwrap();
            store.append_batch(&crate::header("fresh", Some("/p")), &arcs(&turn(0, 1)), false).unwrap_err()
        },
    ] {
        assert!(
            error.to_string().contains("uses .jsonl, but this backend is configured for compression \"zstd\""),
            "{error}"
        );
    }
    let raw = JsonlStore::open_read_only(config(dir.path(), Compression::None)).unwrap();
    let listing = raw.list(&CancellationToken::new()).unwrap();
    let error = fault_of(&listing, "mixed");
    assert!(error.to_string().contains("uses .jsonl.zstd, but this backend is configured for compression \"none\""));
}

#[test]
fn duplicate_ids_across_projects_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path(), Compression::None);
    store.append_batch(&header("dup", Some("/a")), &arcs(&turn(0, 1)), false).unwrap();
    let copy = dir.path().join("--b--/dup");
    fs::create_dir_all(&copy).unwrap();
    fs::copy(dir.path().join("--a--/dup/session.jsonl"), copy.join("session.jsonl")).unwrap();
    let fresh = open_again(dir.path(), Compression::None);
    let error = scan(&fresh, "dup").unwrap_err();
    assert!(matches!(error, PersistenceError::Inconsistent { .. }));
    assert!(error.to_string().contains("duplicate JSONL session id \"dup\" appears in multiple project directories"));
    // The copy under the other project fails its identity binding and is reported on its own.
    let listing = fresh.list(&CancellationToken::new()).unwrap();
    assert_eq!(listed_ids(&listing), ["dup"]);
    let error = fault_of(&listing, "dup");
    assert!(error.to_string().contains("header id \"dup\" and cwd identify"), "{error}");
}

#[test]
fn identity_binding() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path(), Compression::None);
    store.append_batch(&header("real", Some("/a")), &arcs(&turn(0, 1)), false).unwrap();
    // A log moved under another id's directory.
    let moved = dir.path().join("--a--/alias");
    fs::create_dir_all(&moved).unwrap();
    fs::copy(dir.path().join("--a--/real/session.jsonl"), moved.join("session.jsonl")).unwrap();
    let error = scan(&store, "alias").unwrap_err();
    assert!(matches!(error, PersistenceError::Corrupt { kind: session_persistence::CorruptKind::Identity, .. }));
    assert!(error.to_string().contains("requested id \"alias\" does not match header id \"real\""), "{error}");
    let listing = open_again(dir.path(), Compression::None).list(&CancellationToken::new()).unwrap();
    assert_eq!(listed_ids(&listing), ["real"]);
    let error = fault_of(&listing, "alias");
    assert!(error.to_string().contains("header id \"real\" and cwd identify"), "{error}");
    fs::remove_dir_all(&moved).unwrap();

    // A log moved to another project directory.
    fs::rename(dir.path().join("--a--"), dir.path().join("--b--")).unwrap();
    let fresh = open_again(dir.path(), Compression::None);
    let error = scan(&fresh, "real").unwrap_err();
    assert!(error.to_string().contains("header id \"real\" and cwd identify"), "{error}");

    // A symlinked alias of the real directory is the same file.
    std::os::unix::fs::symlink(dir.path().join("--b--"), dir.path().join("--a--")).unwrap();
    let fresh = open_again(dir.path(), Compression::None);
    assert_eq!(scan_ok(&fresh, "real").1.len(), 3);
}

#[test]
fn missing_and_unusable_roots() {
    let dir = tempfile::tempdir().unwrap();
    let absent = dir.path().join("absent");
    let read_only = JsonlStore::open_read_only(config(&absent, Compression::Zstd)).unwrap();
    assert_eq!(read_only.list(&CancellationToken::new()).unwrap(), session_persistence::Listing::default());
    assert!(scan(&read_only, "x").unwrap().is_none());
    assert_eq!(read_only.revision(&id("x")).unwrap(), None);
    let error = read_only.append_batch(&header("x", None), &arcs(&turn(0, 1)), false).unwrap_err();
    assert!(error.to_string().contains("is open read-only"), "{error}");
    assert!(!absent.exists(), "a read-only store creates nothing");

    let file = dir.path().join("file");
    fs::write(&file, b"").unwrap();
    let error = JsonlStore::open(config(&file, Compression::Zstd)).unwrap_err();
    assert!(error.to_string().contains("is not a directory"), "{error}");
    assert!(JsonlStore::open_read_only(config(&file, Compression::Zstd)).is_err());
}

#[test]
fn lookups_use_the_index_and_fall_back_to_a_scan() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path(), Compression::Zstd);
    store.append_batch(&header("moving", Some("/a")), &arcs(&turn(0, 1)), false).unwrap();
    let revision = store.revision(&id("moving")).unwrap().unwrap();
    // Moved by hand to the no-cwd directory (with a matching header, as a fresh write).
    fs::remove_dir_all(dir.path().join("--a--")).unwrap();
    assert_eq!(store.revision(&id("moving")).unwrap(), None);
    store.append_batch(&header("moving", None), &arcs(&turn(0, 2)), false).unwrap();
    let moved = store.revision(&id("moving")).unwrap().unwrap();
    assert_ne!(moved, revision);
    assert_eq!(scan_ok(&store, "moving").1.len(), 4);
}

/// A scan trusts the index without a `stat`, so a log deleted behind the store's back is found
/// missing by the open, and the scan then probes the directories as a fresh lookup would.
#[test]
fn a_scan_through_a_stale_index_probes_again() {
    for compression in [Compression::Zstd, Compression::None] {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path(), compression);
        store.append_batch(&header("stale", Some("/a")), &arcs(&turn(0, 1)), false).unwrap();
        assert_eq!(scan_ok(&store, "stale").1.len(), turn(0, 1).len(), "the scan indexes the log");
        fs::remove_dir_all(dir.path().join("--a--")).unwrap();
        assert!(scan(&store, "stale").unwrap().is_none(), "a deleted log is absent, not an error");
        // Written again in another project directory: found by the probe.
        store.append_batch(&header("stale", None), &arcs(&turn(0, 2)), false).unwrap();
        assert_eq!(scan_ok(&store, "stale").1.len(), turn(0, 2).len());
    }
}

#[test]
fn list_caches_headers_per_file() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path(), Compression::Zstd);
    for session in ["a", "b", "c"] {
        store.append_batch(&header(session, Some("/p")), &arcs(&turn(0, 1)), false).unwrap();
    }
    let cancel = CancellationToken::new();
    let first = store.list(&cancel).unwrap().headers;
    assert_eq!(first.iter().map(|stored| stored.header.id.as_str()).collect::<Vec<_>>(), ["a", "b", "c"]);
    let stats = store.header_cache_stats();
    assert_eq!((stats.hits, stats.misses, stats.entries), (0, 3, 3));

    // Appends change revisions but not headers: the second listing reads no header.
    store.append_batch(&header("b", Some("/p")), &arcs(&turn(3, 1)), true).unwrap();
    let second = store.list(&cancel).unwrap().headers;
    let stats = store.header_cache_stats();
    assert_eq!((stats.hits, stats.misses), (3, 3));
    assert_eq!(second[0], first[0]);
    assert_ne!(second[1].revision, first[1].revision);
    assert_eq!(second[1].header, first[1].header);

    // A replaced file is read again; a deleted one leaves the cache.
    let path_c = store.locate(&header("c", Some("/p"))).unwrap();
    let bytes = fs::read(&path_c).unwrap();
    fs::remove_file(&path_c).unwrap();
    fs::write(&path_c, &bytes).unwrap();
    fs::remove_dir_all(dir.path().join("--p--/a")).unwrap();
    let third = store.list(&cancel).unwrap().headers;
    assert_eq!(third.len(), 2);
    let stats = store.header_cache_stats();
    assert_eq!((stats.hits, stats.misses, stats.entries), (4, 4, 2));
}

/// A read after a listing is offered the listed header, and uses it only while the log still
/// starts with the header's bytes: a header rewritten in place (same file, so possibly the same
/// identity) is read from the file.
#[test]
fn a_read_reuses_a_listed_header_only_while_its_bytes_are_unchanged() {
    for compression in [Compression::None, Compression::Zstd] {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path(), compression);
        store.append_batch(&header("a", Some("/p")), &arcs(&turn(0, 1)), false).unwrap();
        let unlisted = scan_ok(&store, "a");
        assert_eq!(store.header_cache_stats().scan_offers, 0);
        store.list(&CancellationToken::new()).unwrap();
        let listed = scan_ok(&store, "a");
        assert_eq!(store.header_cache_stats().scan_offers, 1, "{compression:?}");
        assert_eq!(listed.1, unlisted.1);
        assert_eq!(
            (listed.0.header, listed.0.n_events, listed.0.n_bytes),
            (unlisted.0.header, unlisted.0.n_events, unlisted.0.n_bytes)
        );

        // Rewrite the header in place to name another session: same file, same inode.
        let path = store.locate(&header("a", Some("/p"))).unwrap();
        let bytes = fs::read(&path).unwrap();
        let (header_len, header_text) = match compression {
            Compression::None => {
                let len = bytes.iter().position(|byte| *byte == b'\n').unwrap() + 1;
                (len, bytes[..len].to_vec())
            }
            _ => {
                let len = zstd::zstd_safe::find_frame_compressed_size(&bytes).unwrap();
                (len, zstd::decode_all(&bytes[..len]).unwrap())
            }
        };
        let renamed = String::from_utf8(header_text).unwrap().replace("\"id\":\"a\"", "\"id\":\"b\"");
        let mut rewritten = match compression {
            Compression::None => renamed.into_bytes(),
            _ => zstd::bulk::compress(renamed.as_bytes(), 3).unwrap(),
        };
        rewritten.extend_from_slice(&bytes[header_len..]);
        let mut file = fs::OpenOptions::new().write(true).open(&path).unwrap();
        std::io::Write::write_all(&mut file, &rewritten).unwrap();
        file.set_len(rewritten.len() as u64).unwrap();
        drop(file);
        let error = scan(&store, "a").unwrap_err();
        assert!(error.to_string().contains("\"b\""), "{compression:?}: {error}");
        if fs::metadata(&path).unwrap().created().is_ok() {
            // With a birth time the file kept its identity: only the byte comparison caught it.
            assert_eq!(store.header_cache_stats().scan_offers, 2, "{compression:?}");
        }
    }
}

#[test]
fn list_skips_junk_and_lists_foreign_versions() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path(), Compression::None);
    store.append_batch(&header("good", Some("/p")), &arcs(&turn(0, 1)), false).unwrap();
    let junk = |name: &str, bytes: &[u8]| {
        let session = dir.path().join("--p--").join(name);
        fs::create_dir_all(&session).unwrap();
        fs::write(session.join("session.jsonl"), bytes).unwrap();
    };
    junk("empty", b"");
    junk("partial", br#"{"type":"session","version":0"#);
    junk("not-json", b"hello\n");
    junk("not-header", b"{\"type\":\"turn/start\"}\n");
    fs::create_dir_all(dir.path().join("--p--/no-transcript")).unwrap();
    junk("future", br#"{"type":"session","version":2,"id":"future","createdAt":1,"cwd":"/p","delegationDepth":0}"#);
    fs::OpenOptions::new()
        .append(true)
        .open(dir.path().join("--p--/future/session.jsonl"))
        .unwrap()
        .write_all(b"\n")
        .unwrap();
    let listing = store.list(&CancellationToken::new()).unwrap();
    let ids: Vec<(&str, u32)> =
        listing.headers.iter().map(|stored| (stored.header.id.as_str(), stored.header.version)).collect();
    assert_eq!(ids, [("future", 2), ("good", 0)]);
    // What the reference skips is not listed, but each is reported as its own fault; a session
    // directory without a log is nothing.
    let faulty: Vec<&str> = listing.faults.iter().map(|fault| fault.id.as_str()).collect();
    assert_eq!(faulty, ["empty", "not-header", "not-json", "partial"]);
    for fault in &listing.faults {
        assert!(matches!(fault.error, PersistenceError::Corrupt { .. }), "{fault:?}");
        assert!(fault.header.is_none());
    }
    let error = scan(&store, "future").unwrap_err();
    assert!(matches!(error, PersistenceError::FormatUnsupported { .. }));
    assert!(error.to_string().contains("uses log format v2") && error.to_string().contains("(raw log: "), "{error}");

    junk(
        "retired",
        br#"{"type":"session","version":0,"id":"retired","createdAt":1,"delegationDepth":0,"approvalPolicy":"x"}
"#,
    );
    let listing = store.list(&CancellationToken::new()).unwrap();
    assert_eq!(listed_ids(&listing), ["future", "good"]);
    let error = fault_of(&listing, "retired");
    assert!(error.to_string().contains("retired policy baseline fields"), "{error}");
}

/// A symlinked alias of a session directory is the same log: the session is listed once, from
/// its own path, and nothing is reported. A log that is a dangling symlink is an error on read,
/// not an absent session.
#[test]
fn aliases_list_once_and_dangling_logs_are_errors() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path(), Compression::None);
    store.append_batch(&header("real", Some("/a")), &arcs(&turn(0, 1)), false).unwrap();
    std::os::unix::fs::symlink(dir.path().join("--a--/real"), dir.path().join("--a--/alias")).unwrap();
    let listing = open_again(dir.path(), Compression::None).list(&CancellationToken::new()).unwrap();
    assert_eq!(listed_ids(&listing), ["real"]);
    assert!(listing.faults.is_empty(), "{listing:?}");
    assert_eq!(listing.headers[0].header.id.as_str(), "real");

    store.append_batch(&header("gone", Some("/a")), &arcs(&turn(0, 1)), false).unwrap();
    let log = dir.path().join("--a--/gone/session.jsonl");
    fs::remove_file(&log).unwrap();
    std::os::unix::fs::symlink(dir.path().join("nowhere"), &log).unwrap();
    let fresh = open_again(dir.path(), Compression::None);
    let error = scan(&fresh, "gone").unwrap_err();
    assert!(error.to_string().contains("symlink to nothing"), "{error}");
    assert!(fresh.revision(&id("gone")).is_err());
    let listing = fresh.list(&CancellationToken::new()).unwrap();
    assert!(fault_of(&listing, "gone").to_string().contains("symlink to nothing"));
}
