//! Runs a suite's cases, each on a fresh place under its own Tokio runtime, catching a failing
//! case's panic, and reports every case by name: one case (what each `#[test]` the suite macros
//! write runs) or a whole suite in one call.

use std::{
    cell::RefCell,
    fmt,
    future::Future,
    panic::{self, AssertUnwindSafe},
    pin::Pin,
    sync::Once,
};

use crate::{CheckpointPlace, Place};

/// A case's future, borrowing its context.
pub(crate) type CaseFuture<'a> = Pin<Box<dyn Future<Output = ()> + 'a>>;

/// One named case of a suite.
pub(crate) struct Case<S: ?Sized + 'static> {
    pub(crate) name: &'static str,
    pub(crate) run: for<'a> fn(&'a Cx<'a, S>) -> CaseFuture<'a>,
}

/// What a case gets: its place, and a way to say what it skipped.
pub(crate) struct Cx<'a, S: ?Sized> {
    pub(crate) place: &'a S,
    notes: RefCell<Vec<String>>,
}

impl<S: ?Sized> Cx<'_, S> {
    /// Records something the report should say about this case, such as a check it skipped.
    pub(crate) fn note(&self, note: impl Into<String>) {
        let note = note.into();
        let mut notes = self.notes.borrow_mut();
        if !notes.contains(&note) {
            notes.push(note);
        }
    }
}

/// Turns a backend author's place into the trait object a suite runs on. Implemented for every
/// [`Place`] (for the persistence and coordinator suites) and every [`CheckpointPlace`] (for the
/// checkpoint-store suite); there is nothing to implement.
pub trait IntoPlace<S: ?Sized> {
    /// The place as the suite's trait object.
    fn into_place(self) -> Box<S>;
}

impl<P: Place + 'static> IntoPlace<dyn Place> for P {
    fn into_place(self) -> Box<dyn Place> {
        Box::new(self)
    }
}

impl<P: CheckpointPlace + 'static> IntoPlace<dyn CheckpointPlace> for P {
    fn into_place(self) -> Box<dyn CheckpointPlace> {
        Box::new(self)
    }
}

/// A contract suite: named cases over one kind of place ([`Place`] or [`CheckpointPlace`]).
/// Get one from [`persistence_contract`](crate::persistence_contract()),
/// [`coordinator_contract`](crate::coordinator_contract()) or
/// [`checkpoint_store_contract`](crate::checkpoint_store_contract()).
pub struct Suite<S: ?Sized + 'static> {
    name: &'static str,
    cases: Vec<Case<S>>,
}

impl<S: ?Sized + 'static> fmt::Debug for Suite<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Suite").field("name", &self.name).field("cases", &self.case_names()).finish()
    }
}

impl<S: ?Sized + 'static> Suite<S> {
    pub(crate) fn new(name: &'static str, cases: Vec<Case<S>>) -> Suite<S> {
        let mut names: Vec<&str> = cases.iter().map(|case| case.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), cases.len(), "the cases of the {name} have distinct names");
        Suite { name, cases }
    }

    /// The suite's name, as the report prints it (for example `persistence contract`).
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// The names of the suite's cases, in the order they run.
    pub fn case_names(&self) -> Vec<&'static str> {
        self.cases.iter().map(|case| case.name).collect()
    }

    /// The suite with only the cases whose name `keep` accepts.
    pub fn only(mut self, keep: impl Fn(&str) -> bool) -> Suite<S> {
        self.cases.retain(|case| keep(case.name));
        self
    }

    /// Runs every case, each on a place of its own from `fresh`, and returns the report without
    /// panicking, whatever failed.
    pub fn check<P: IntoPlace<S>>(&self, fresh: impl Fn() -> P) -> Report {
        println!("{}: {} case(s)", self.name, self.cases.len());
        let cases = self.cases.iter().map(|case| run_case(case, fresh().into_place())).collect();
        Report { suite: self.name, cases }
    }

    /// Runs every case as [`check`](Suite::check) does, then panics naming every case that failed.
    pub fn run<P: IntoPlace<S>>(&self, fresh: impl Fn() -> P) -> Report {
        let report = self.check(fresh);
        report.assert_passed();
        report
    }

    /// Runs the one case named `case` on a place from `fresh`, prints its report line and
    /// returns it, or panics with that line when the case failed. This is what each `#[test]`
    /// of the suite macros ([`persistence_contract!`](crate::persistence_contract!) and the
    /// others) runs.
    ///
    /// # Panics
    ///
    /// When the case fails, or the suite has no case named `case`.
    pub fn run_case<P: IntoPlace<S>>(&self, case: &str, fresh: impl FnOnce() -> P) -> CaseReport {
        let Some(found) = self.cases.iter().find(|found| found.name == case) else {
            panic!("the {} has no case named {case:?}; its cases: {:?}", self.name, self.case_names())
        };
        let report = run_case(found, fresh().into_place());
        if !report.passed() {
            panic!("{}: {report}", self.name);
        }
        report
    }
}

thread_local! {
    /// Where the last panic on this thread happened, recorded by the hook [`record_panic_locations`]
    /// installs.
    static LAST_PANIC: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Installs, once per process, a panic hook that records where each panic happened (for the
/// report) and then runs the hook that was installed before it, so panics print as they did.
fn record_panic_locations() {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        let previous = panic::take_hook();
        panic::set_hook(Box::new(move |info| {
            let location = info.location().map(|location| format!("{}:{}", location.file(), location.line()));
            LAST_PANIC.with(|last| *last.borrow_mut() = location);
            previous(info);
        }));
    });
}

fn run_case<S: ?Sized + 'static>(case: &Case<S>, place: Box<S>) -> CaseReport {
    record_panic_locations();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a Tokio runtime for the case starts");
    let cx = Cx { place: &*place, notes: RefCell::new(Vec::new()) };
    LAST_PANIC.with(|last| last.borrow_mut().take());
    let result = panic::catch_unwind(AssertUnwindSafe(|| runtime.block_on((case.run)(&cx))));
    let outcome = match result {
        Ok(()) => {
            drop(runtime);
            Outcome::Passed { notes: cx.notes.into_inner() }
        }
        Err(payload) => {
            // A failed case may leave a blocking task waiting on something that will never come:
            // let it go rather than wait for it.
            runtime.shutdown_background();
            let location = LAST_PANIC.with(|last| last.borrow_mut().take());
            Outcome::Failed { message: session_core::panic_text(payload.as_ref()), location }
        }
    };
    drop(place);
    let report = CaseReport { name: case.name, outcome };
    println!("{report}");
    report
}

/// How one case went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Every assertion held. `notes` says what the case skipped because the place lacks a hook
    /// (for example the stored-bytes checks of a backend without files).
    Passed {
        /// What the case skipped, or else had to say; empty for most cases.
        notes: Vec<String>,
    },
    /// The case panicked: an assertion failed, or the backend panicked.
    Failed {
        /// The panic's message.
        message: String,
        /// Where the case panicked (`file:line`), when the panic happened on the case's own
        /// thread; a panic in a task the case spawned reaches it as a panic where it was awaited.
        location: Option<String>,
    },
}

/// One case's name and outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaseReport {
    /// The case's name, as in [`Suite::case_names`].
    pub name: &'static str,
    /// How it went.
    pub outcome: Outcome,
}

impl CaseReport {
    /// Whether the case passed.
    pub fn passed(&self) -> bool {
        matches!(self.outcome, Outcome::Passed { .. })
    }
}

impl fmt::Display for CaseReport {
    /// `ok <case>` (with what it skipped in parentheses) or `FAILED <case> (at <file:line>):
    /// <message>`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.outcome {
            Outcome::Passed { notes } if notes.is_empty() => write!(f, "ok {}", self.name),
            Outcome::Passed { notes } => write!(f, "ok {} ({})", self.name, notes.join("; ")),
            Outcome::Failed { message, location: None } => write!(f, "FAILED {}: {message}", self.name),
            Outcome::Failed { message, location: Some(location) } => {
                write!(f, "FAILED {} (at {location}): {message}", self.name)
            }
        }
    }
}

/// Every case of one suite run, in the order they ran.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// The suite's name.
    pub suite: &'static str,
    /// Each case's report.
    pub cases: Vec<CaseReport>,
}

impl Report {
    /// How many cases passed.
    pub fn passed(&self) -> usize {
        self.cases.iter().filter(|case| case.passed()).count()
    }

    /// The cases that failed.
    pub fn failures(&self) -> Vec<&CaseReport> {
        self.cases.iter().filter(|case| !case.passed()).collect()
    }

    /// Panics naming every case that failed, with its message; does nothing if none did.
    pub fn assert_passed(&self) {
        let failures = self.failures();
        if failures.is_empty() {
            return;
        }
        let names: Vec<&str> = failures.iter().map(|case| case.name).collect();
        let details: Vec<String> = failures.iter().map(ToString::to_string).collect();
        panic!(
            "{}: {} of {} case(s) failed: {}\n{}",
            self.suite,
            failures.len(),
            self.cases.len(),
            names.join(", "),
            details.join("\n")
        );
    }
}
