//! Raising a restriction on a disk whose speed is not known yet, so that the disk can show it:
//! a restriction from the assumed slow disk holds a faster disk's writer at that speed, which
//! never builds the backlog a measurement needs.
//!
//! Under the kernel's rate control (iocost on a disk not yet measured) the rate is forced up
//! in steps. How large a step is comes from what the disk did during the previous one: the
//! bytes it completed per second its writes spent in flight (Little's law: writes served one
//! after another, each in flight for its size over the disk's speed) is what the disk would
//! complete if kept busy. A disk that completed what it was let write with a short queue has
//! room to spare; one that queued to complete it does not. The disk shows its speed as soon as
//! it completes less than the forced rate with writes waiting (`RateHold::AtLeast`), not only
//! under a backlog of four writes, which memory.high keeps the held writer from making.
use std::time::{Duration, SystemTime};

use crate::{
    act::Method,
    config::DevicePolicy,
    detect::{bandwidth::Estimate, pressure},
    display::show_rate,
    model::{sample::DiskDelta, sliding_span::SlidingSpan},
};

/// How long a restriction on a disk whose capacity is not known (not measured, or only a lower
/// bound) keeps what it was made with.
pub const PROBE_AFTER: Duration = Duration::from_secs(10);
/// How often the probe steps.
///
/// A write limit is the figure itself after [`PROBE_AFTER`], doubled every step until the disk is
/// measured under a backlog, and lifted only after [`PROBE_DOUBLINGS`] doublings (400 MB/s from
/// the assumed 25 MB/s). Lifting it at once let the writer flood a disk that really is that
/// slow: on the 6.12 bed the innocents paused 0.8-1 s right after each lift (cp bench,
/// docs/bench/cp.md). A lower bound does not end the probe: a limit below it never lets a
/// backlog form, so the disk would stay at that bound, under io.max, for good (seen in the
/// systemd e2e on 6.1: the first step, 25 MB/s, found the disk "at least 25.2 MB/s", and the
/// writer stayed at 18.9 MB/s instead of moving to iocost).
pub const PROBE_STEP: Duration = Duration::from_secs(5);
pub const PROBE_DOUBLINGS: u32 = 4;

/// A step of the forced rate on a disk that showed no room to spare: a quarter. Doubling
/// overshot the bed's 30 MB/s disk (0.5-1.0 s pauses right after the 50 MB/s step on 6.12,
/// docs/bench/iocost-ceiling.md).
const QUARTER: f64 = 1.25;
/// The largest step, on a disk with room to spare.
const MOST: f64 = 2.0;
/// The share of the speed the disk would complete if kept busy that a step goes up to: its
/// writes' time in flight also counts waits that are not the disk's (a cache flush, the
/// scheduler), and a disk with a write cache completes a burst faster than it writes, so the
/// figure is taken with a wide margin. Little's law overstated the bed's 30 MB/s disk 1.3-1.9
/// times (busy speeds of 39-56 MB/s at the assumed 25 MB/s, 12 steps over 5 benches) and its
/// 80-100 MB/s fast disk about 2 times (167-284 MB/s): with 0.8, 6.12's 30 MB/s disk showed
/// "room" at 15 s in 2 of 2 runs, was forced to 35-39 MB/s and paused the committing load
/// 1.0-2.2 s; with a half none of those 12 steps would have, and every fast-disk one does. The
/// windows before the first steps ([`LISTEN`]) queue less: one on the 30 MB/s disk showed 0.20
/// writes in flight at 17.1 MB/s, a busy speed of 85 MB/s (docs/bench/speed-probe.md, stop 27).
const ROOM_MARGIN: f64 = 0.5;
/// A step shows room only when the disk completed at least this share of what it was let
/// write: a writer that did not use its rate says nothing of the disk.
///
/// On the 6.12 bed the held writer uses less: it wrote about 0.4 times its memory.high per
/// second (20.7 MB/s under 47 MiB, 50.5 MB/s under 116 MiB) whatever the rate, with 0.11-0.25
/// writes in flight on a disk that completed 90 MB/s under a backlog. Letting a step go up to
/// four times what the disk completed (with half the judged speed completed at least) brought
/// 6.12's rate to 125-134 MB/s 20 s into the restriction, past that disk's speed for the
/// 10-16 s until it was measured: commit paused 0.81 (0.94) s against 0.47 (0.56) s with this
/// rule (bench-room150c against -b, 2 runs each, docs/bench/speed-probe.md); up to twice
/// what it completed climbed too slowly to measure the disk in 50 s (bench-room150d).
const ROOM_BUSY: f64 = 0.7;
/// The same share for a window before the rate is forced, of the rate it was held at. On the
/// 6.12 bed the held writer completed 17-21 MB/s of the held 25 MB/s in the windows of the
/// 150 MB/s disk, around [`ROOM_BUSY`] of it: with 0.7 room showed in 3 of 5 runs
/// (bench-b4-150, bench-b6-150, vm ci), and the corrected vm ci check would fail about half the
/// time. The price: one window on the 30 MB/s disk completed 17.1 MB/s with 0.20 writes in
/// flight, which 0.7 refused and 0.6 takes for room (forced to 43 MB/s, commit paused 0.75 s
/// until the disk was measured 3.6 s later; bench-head-30, 1 run of 2). A step from a window
/// goes at most to [`MOST`] times the held rate.
const LISTENED_BUSY: f64 = 0.6;
/// A window's writer is seen as one that uses too little of its rate to be held by more than
/// iocost's weight ([`Method::lightened`]) only when the disk completed under this share of the
/// rate: the untar's windows completed 3.3-6.4 MB/s of the held 25 (0.13-0.26), a copy's at
/// least 14 (6.12's held copy, whose first window may fall short of [`LISTENED_BUSY`]: one at
/// 14.3 MB/s was lightened under a rule without this share, dumped 201 MB into the page cache
/// within 2 s and paused the daemon 5 s in the memory.high write that held it again,
/// bench-light41b-cp).
const LIGHT_BUSY: f64 = 0.4;
/// How long before a step that may show room the rate is handed to the kernel's latency
/// control (`Method::listening`): under the held rate's 10 ms slices every disk completes the
/// held writer's writes at once (0.09-0.11 writes in flight at 18-21 MB/s on both the 30 and
/// the 150 MB/s disk of the 6.12 bed), so only the rate control's longer slices, whose bursts
/// queue on a disk without room, tell the two apart.
const LISTEN: Duration = Duration::from_secs(3);
/// The steps judged on such a window: the fast disk showed room at the first or second step
/// in every run, and the windows later in a restriction paused the committing load more
/// (0.48-0.70 s at 18-24 s, against 0.18-0.31 s at 7-15 s, 6.12 bed; bench-b4-30). The second
/// only when the first said nothing (`SpeedProbe::no_room`).
const LISTENED_STEPS: u32 = 2;
/// Seconds of the disk's counters a step is judged on.
const ROOM_SECONDS: f64 = 2.0;

/// The share of the time a cgroup beside the restriction may spend waiting on I/O under a
/// rate forced for the room a window showed before the step is taken back
/// ([`SpeedProbe::others_stalled`]). A window shows room the bed's 30 MB/s disk does not have
/// now and then (3 of 6 first copies on 6.12 at stop 48): forced to 41 MB/s, the innocents'
/// cgroup waited 22-23% of the first second after the step (2 of 2 runs), and the committing
/// load paused 0.61 s, then 0.90 s more before the disk was measured 5.3 s later. Under the
/// rates forced for the 150 MB/s disk's room it waited at most 10% of any second
/// (`PSI_TRACE=1` runs of `tests/vm/stall.sh`, docs/bench/speed-probe.md).
pub const OTHERS_HURT: f64 = 0.15;

/// The share of the time the cgroups beside the restriction may wait on I/O over a span heard
/// under a step that forced the rate up and still have that span raise the writer's
/// memory.high on its way ([`SpeedProbe::others_waited`]): at this or more memory.high holds
/// where it is.
///
/// On the way up the others' wait tells a disk at its speed from one with room before any
/// queue does. 60 s copies on the bed's 30 MB/s disk (stop 76, 6 runs): as memory.high went
/// from 8 to 41 MiB under a false room, the disk kept up in every span (21-24 MB/s with
/// 0.10-0.38 writes in flight) while the others' wait rose from 1% to 5-14%, and the one
/// committing-load pause over 0.25 s came under the quarter after it, at 44 MiB, as they
/// waited 29-31%. On the 150 MB/s disk (4 runs, the same rates forced, the writer completing
/// 18-38 MB/s) they waited 0-4% throughout. Held so, 12 of 12 such copies (stop 77, two
/// benches) kept every innocent within 0.25 s, the worst commit pause 0.18 s, against 11 of 12
/// and 0.28 s the same session; the 150 MB/s disk's never held (docs/bench/speed-probe.md).
const OTHERS_FELT: f64 = 0.05;

/// Writes in flight on average over the last [`pressure::MIN_SPAN`] or more (heard every
/// [`pressure::HEAR_EVERY`]) under a rate forced up for room from which the disk counts as
/// queuing the writes it was let have, when it completed less than the step's least
/// ([`QUARTER`] times the rate it went up from): the room was not the disk's
/// ([`SpeedProbe::disk_queued`]).
///
/// The others' wait ([`OTHERS_HURT`]) tells late: it took back 9 of the 10 false rooms on the
/// bed's 30 MB/s disk with a debug log before this rule (stops 52-66) 1.8-5.0 s after the step,
/// once the committing load had paused (0.50 s on 6.1 in stop 65's status bench); the tenth
/// held its false rate until it was kept as the disk's lower bound. In the first second after
/// the step those disks had 0.17-0.96 writes in flight (0.5 or more in 8 of 18 false rooms,
/// 0.45-0.49 in 3 more; stops 65-66), against 0.13-0.34 in the held seconds before. Under the
/// rates forced for the 150 MB/s disk's room, in the 5 s after each of 8 room steps (stop 66
/// benches and `vm ci`, both kernels), it kept 0.09-0.36 whenever it completed less than the
/// step's least, and up to 0.42 at 32 MB/s, just over it: 0.4 would risk taking back a room the
/// disk has (and `vm ci`'s probe check fails then). At 0.5 the rule took back 8 false rooms
/// 0.8-4.0 s after their steps (stop 66, docs/bench/speed-probe.md).
const ROOM_QUEUED: f64 = 0.5;

/// A disk never shown to have room keeps the rate control capped at its model this long before
/// the rate is forced up a quarter every [`PROBE_STEP`] until the disk shows its speed.
///
/// Why a cap at the model, not above it, until then: raising the cap a quarter above what the
/// disk had shown after 10 s paused 6.12's committing load 0.61-0.69 s from 10 to 30 s into
/// the restriction, against 0.32-0.38 s under the cap at the model before it (bench-allow3,
/// docs/bench/iocost-ceiling.md). A 20 s copy, which ends before any forcing: commit 0.40
/// (0.38-0.49) s under the model throughout, against 0.49 (0.74) s with the raised cap
/// (docs/bench/speed-probe.md).
///
/// Why 30 s: a disk the rate control keeps short of a backlog is never measured (in the
/// systemd e2e the 30 MB/s disk wrote 22-33 MB/s with under one write queued for 90 s), so a
/// long writer (a backup) pays for the measurement once per disk, a copy of a few seconds
/// never. Forcing from 10 s on every disk (3 runs each, docs/bench/iocost-ceiling.md): a
/// writer held 50 s gained a little (6.12 commit 0.76 (0.82) s against 0.78 (0.79) s, the
/// writer 0.54x against 0.48x), but a 20 s copy on 6.12 paid for the forced steps: commit
/// 0.91 (1.00) s against 0.60 (0.66) s. A disk with room to spare is forced at once instead.
pub const RATE_FORCE_AFTER: Duration = Duration::from_secs(30);

/// A kept "no room" answer stands for a restriction held down to this share under the rate it
/// was given at: one held lower may find room the answer did not rule out.
const SAME_RATE: f64 = 0.05;

/// Whether a restriction at `bw` bytes per second (or a lower bound of the disk's speed at
/// `bw`) is one a "no room" answer at `no_room` stands for: from [`SAME_RATE`] under it up to,
/// not including, a quarter above it. A window shows room only for a step of at least a
/// quarter ([`Window::room`]), so its "no room" said the disk could not take [`QUARTER`] times
/// the rate; a disk judged faster than that has shown more than the answer. Below that the
/// answer stands: with 5% either side, the writer held under the bed's answer at 25 MB/s
/// showed its 30 MB/s disk to be at least 26.7-26.9 MB/s (6.12, 3 of 3 runs, stop 45), the
/// daemon forgot the answer, and the next copy paid for windows again.
pub fn covered_by_no_room(bw: f64, no_room: f64) -> bool {
    (1.0 - SAME_RATE..QUARTER).contains(&(bw / no_room))
}

/// How long a kept "no room" answer stands before a restriction asks a window again. A disk
/// that queued at the assumed speed once may not any more (the window may have met someone
/// else's writes), and while the answer stands, short writers there are held at that rate
/// without a look: a false answer on a fast disk would hold every copy shorter than 30 s at
/// 25 MB/s for good. A window costs a copy on the slow disk about a tenth of a second of its
/// committing neighbour's longest pause (0.33-0.52 s against 0.23-0.35 s held, 6.12, stop 39):
/// once a day is cheap.
pub const NO_ROOM_KEPT: Duration = Duration::from_secs(24 * 3600);

/// A kept "no room" answer: the rate a window showed no room at, and when.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct NoRoom {
    pub rate: f64,
    pub since: SystemTime,
}

impl NoRoom {
    /// Whether the answer still stands at `now` ([`NO_ROOM_KEPT`]); a clock set back leaves it
    /// standing.
    pub fn fresh(&self, now: SystemTime) -> bool {
        !now.duration_since(self.since)
            .is_ok_and(|age| age >= NO_ROOM_KEPT)
    }

    /// The rate of a kept answer that still stands at `now`, for [`SpeedProbe::remembering`].
    pub fn standing(kept: Option<NoRoom>, now: SystemTime) -> Option<f64> {
        kept.filter(|n| n.fresh(now)).map(|n| n.rate)
    }
}

/// What a restriction's probe showed of the disk, for the restrictions after it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Room {
    /// A window in which the writer used the rate held at this many bytes per second showed
    /// the disk queuing.
    NoneAt(f64),
    /// A rate forced up from this many bytes per second for the room a window showed was taken
    /// back because the others waited on I/O under it ([`SpeedProbe::others_stalled`]): weaker
    /// than [`Room::NoneAt`], a single wait of another process can make it (see
    /// [`TAKE_BACKS_KEPT`]).
    TakenBackAt(f64),
    /// A step found room to spare and forced the rate up.
    Spare,
}

/// How many take-backs ([`Room::TakenBackAt`]) a disk needs before the daemon keeps "no room"
/// from one for the restrictions after it (and across restarts), as it keeps a window's.
///
/// One is not enough: a single wait of another process of 150 ms or more in a second (a
/// journal commit, a `sync`) crosses [`OTHERS_HURT`], and the 150 MB/s disk's room was taken
/// back so in 2 of 4 runs when the others were read over a sliding second (stop 50), which
/// left "no room at 25 MB/s" kept for a day on a disk six times faster: every later copy held
/// at the assumed speed with no window until its rate is forced at 30 s. A slow disk's false
/// room is taken back again at its next restriction that shows one, and kept then.
pub const TAKE_BACKS_KEPT: u32 = 2;

/// What the restrictions after this one keep of what its probe `shown`, given the answer kept
/// so far and the take-backs heard on the disk: `Some(answer)` to keep `answer` from now (`None`
/// forgets the kept one), `None` to leave the kept answer as it is.
pub fn answer_to_keep(
    shown: Option<Room>,
    kept: Option<NoRoom>,
    take_backs: u32,
    now: SystemTime,
) -> Option<Option<NoRoom>> {
    // Given again after the last one lapsed, or at another rate: it stands from now.
    let anew = |rate: f64| kept.is_none_or(|n| n.rate != rate || !n.fresh(now));
    match shown? {
        Room::NoneAt(rate) if anew(rate) => Some(Some(NoRoom { rate, since: now })),
        Room::TakenBackAt(rate) if take_backs >= TAKE_BACKS_KEPT && anew(rate) => {
            Some(Some(NoRoom { rate, since: now }))
        }
        Room::Spare if kept.is_some() => Some(None),
        _ => None,
    }
}

/// What the disk did since a step that forced the rate up for room, heard every
/// [`pressure::HEAR_EVERY`] ([`SpeedProbe::hear`]): judged over the last [`pressure::MIN_SPAN`]
/// or more, as the others' wait is, so that a short reading is not judged alone.
#[derive(Clone, Debug, Default, PartialEq)]
struct UnderRoom {
    /// What the disk did since the step, in all, at each reading, by the seconds heard then.
    readings: SlidingSpan<Duration, Window>,
    /// A span over which the disk queued without using the room: what it completed (bytes per
    /// second) and its writes in flight ([`ROOM_QUEUED`]).
    queued: Option<(f64, f64)>,
    /// Spans of [`pressure::MIN_SPAN`], each after the last, that showed the disk keeping up:
    /// the writer's memory.high goes up with them ([`SpeedProbe::room_ramp`]).
    kept_up: u32,
    /// Seconds heard since the step or the last span counted in `kept_up`.
    since_kept_up: f64,
    /// What the disk did over the last span counted in `kept_up`: bytes per second and writes
    /// in flight, for the log.
    last_kept_up: (f64, f64),
    /// Whether a reading since the last span counted had the others wait [`OTHERS_FELT`] or
    /// more, holding memory.high where it was: a span counts only from the last such reading.
    holding: bool,
    /// The others waited so at this reading, told before the disk's: the span under way
    /// ends with it, raising nothing.
    felt_now: bool,
}

impl UnderRoom {
    /// Adds a reading of `seconds`, under a step that let the writer write `top` at most.
    fn hear(&mut self, delta: &DiskDelta, seconds: f64, top: f64) {
        if self.readings.last().is_none() {
            // The step itself: the first span starts there.
            self.readings
                .push(Duration::ZERO, Window::default(), pressure::MIN_SPAN);
        }
        let mut heard = self.readings.last().copied().unwrap_or_default();
        heard.add(delta, seconds);
        if std::mem::take(&mut self.felt_now) {
            self.since_kept_up = 0.0;
        } else {
            self.since_kept_up += seconds;
        }
        let at = Duration::try_from_secs_f64(heard.seconds).unwrap_or_default();
        let Some(span) = self.readings.push(at, heard, pressure::MIN_SPAN) else {
            return;
        };
        let span = span.end.since(span.start);
        let (rate, queue) = (
            span.bytes as f64 / span.seconds,
            span.writing / span.seconds,
        );
        if queue >= ROOM_QUEUED && rate < QUARTER * top {
            self.queued = Some((rate, queue));
            // The next span counts from here: one that queued raises nothing.
            self.since_kept_up = 0.0;
        } else if self.since_kept_up >= pressure::MIN_SPAN.as_secs_f64() {
            self.kept_up += 1;
            self.since_kept_up = 0.0;
            self.holding = false;
            self.last_kept_up = (rate, queue);
        }
    }

    /// The others waited [`OTHERS_FELT`] or more of the last span: the span under way raises
    /// nothing, the next counts from here.
    fn felt(&mut self) -> bool {
        self.felt_now = true;
        !std::mem::replace(&mut self.holding, true)
    }
}

/// What a disk did during a step.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Window {
    bytes: u64,
    /// Seconds writes spent in flight, summed over requests.
    writing: f64,
    seconds: f64,
}

impl Window {
    /// Adds what the disk did over a sample of `seconds`.
    fn add(&mut self, delta: &DiskDelta, seconds: f64) {
        self.bytes += delta.written;
        self.writing += delta.writing();
        self.seconds += seconds;
    }

    /// What the disk did after `earlier`, a reading of the same running total.
    fn since(&self, earlier: &Window) -> Window {
        Window {
            bytes: self.bytes.saturating_sub(earlier.bytes),
            writing: self.writing - earlier.writing,
            seconds: self.seconds - earlier.seconds,
        }
    }

    /// The rate the disk showed room for, if it completed at least `busy_share` of `top` (the
    /// fastest it was let write) with time to spare: at most [`MOST`] times `top`, and `None`
    /// under a quarter more (no room).
    /// `span_busy` caps the disk's busy speed: the slowest of the window's spans
    /// ([`Spans::slowest`]).
    fn room(&self, top: f64, busy_share: f64, span_busy: f64) -> Option<f64> {
        if !self.busy(top, busy_share) {
            return None;
        }
        let next = (MOST * top).min(ROOM_MARGIN * self.busy_speed().min(span_busy));
        (next >= QUARTER * top).then_some(next)
    }

    /// What the disk completed per second its writes spent in flight.
    fn busy_speed(&self) -> f64 {
        if self.writing > 0.0 {
            self.bytes as f64 / self.writing
        } else {
            f64::INFINITY
        }
    }

    /// Whether the writer used the rate it was let write (`busy_share` of `top`) for long
    /// enough to say something of the disk.
    fn busy(&self, top: f64, busy_share: f64) -> bool {
        self.seconds >= ROOM_SECONDS
            && top > 0.0
            && self.bytes as f64 / self.seconds >= busy_share * top
    }
}

/// A window's spans of [`pressure::MIN_SPAN`] or more, one after the other, each judged on
/// its own: room shown on average over a window may hide a span in which the disk queued.
///
/// On the bed's 30 MB/s disk the windows' bursts queue now and then, and the window's average
/// still shows a busy speed well over twice the held rate: 67 of 84 windows on that disk in
/// stops 71-73's benches showed room it does not have, and their slowest whole second had a busy
/// speed of 27-261 MB/s (under 62.5 MB/s in 26), where the 150 MB/s disk's slowest had 182-288
/// (12 windows, both kernels; docs/bench/window73/window_spans.py). Judged span by span, 6.12's
/// copy and load offender, 12 runs, paused the committing load at most 0.18 s in the window
/// and under the forced rates, against 0.36 s for the build before in 12 runs the same session
/// (two 60 s runs later: 0.28 and 0.30 s under false rooms, whose every second looked roomy);
/// the 150 MB/s disk kept its rooms (4 of 4, docs/bench/speed-probe.md, "Stop 73").
#[derive(Clone, Debug, Default, PartialEq)]
struct Spans {
    open: Window,
    closed: Vec<Window>,
}

impl Spans {
    fn add(&mut self, delta: &DiskDelta, seconds: f64) {
        self.open.add(delta, seconds);
        if self.open.seconds >= pressure::MIN_SPAN.as_secs_f64() {
            self.closed.push(std::mem::take(&mut self.open));
        }
    }

    /// The slowest busy speed (bytes per second of writes in flight) of the spans in which the
    /// writer used `busy_share` of `top`: a span in which it wrote less says nothing of the
    /// disk (a writer asleep under memory.high while the others' flushes queue).
    fn slowest(&self, top: f64, busy_share: f64) -> Option<&Window> {
        self.closed
            .iter()
            .filter(|s| s.bytes as f64 >= busy_share * top * s.seconds)
            .min_by(|a, b| a.busy_speed().total_cmp(&b.busy_speed()))
    }
}

/// One restriction's probe of its disk's speed.
#[derive(Clone, Debug, Default)]
pub struct SpeedProbe {
    window: Window,
    /// The spans of a window under the kernel's latency control (`listening`).
    spans: Spans,
    /// The rate the kernel's rate control is held at, at least, once forced.
    forced: Option<u64>,
    /// How long the restriction had held at the last step.
    stepped: Option<Duration>,
    /// What the last step saw, for the log.
    seen: String,
    /// Steps taken.
    steps: u32,
    /// Whether the window since the last step is one under the kernel's latency control.
    listening: bool,
    /// The held rate at which a window in which the writer used its rate showed the disk
    /// without room: the disk queued its writes at that rate, which a second window would only
    /// show again, at the innocents' cost: in the shipped default's copy bench of stop 38 the
    /// second window held the committing load's longest pause in 2 of 4 runs (0.74 s on 6.12,
    /// 0.33 s on 6.1, where the held seconds paused it at most 0.29 and 0.15 s;
    /// docs/bench/one-window.md). The same holds for the next restriction on the disk: every
    /// 6.12 copy's one window paused the committing load more than its held seconds (0.33-0.52
    /// s against 0.23-0.35 s, stop 39).
    no_room: Option<f64>,
    /// Whether `no_room` is an earlier restriction's answer ([`SpeedProbe::remembering`]).
    remembered: bool,
    /// Whether `no_room` came from a take-back ([`SpeedProbe::others_stalled`]), not a window.
    taken_back: bool,
    /// Whether a step found room to spare.
    room: bool,
    /// The highest rate a step forced for the room the disk showed, or forced after one and
    /// then held for a whole step without the disk showing its speed: see
    /// [`SpeedProbe::room_proven`].
    room_bound: Option<f64>,
    /// What the windows (or the files it writes) showed of the writer: see [`Light`].
    light: Option<Light>,
    /// Why it was seen light, for the daemon's log.
    seen_as: String,
    /// What the probe was before its last step, when that step forced the rate up for the
    /// room a window or step showed: taken back if the others wait on I/O under it, or the disk
    /// queues.
    before_room: Option<BeforeRoom>,
    /// The rate the last step forced up a quarter from (no room shown by [`RATE_FORCE_AFTER`],
    /// or none at a step after a room): the writer's memory.high goes up as the disk is heard
    /// keeping up ([`SpeedProbe::room_ramp`]), and a queue under it is the measurement the
    /// step is for, not a reason to take it back.
    quarter_from: Option<f64>,
    /// The writer's memory.high when the last step forced the rate up, as the engine found it
    /// at its first retune under the step ([`SpeedProbe::ramp_base`]): the way up starts there.
    ramp_base: Option<u64>,
    /// The memory.high the writer had at the step for room last taken back, which it keeps
    /// until the next step ([`SpeedProbe::taken_back_to`]).
    taken_back_to: Option<u64>,
    /// What the disk did since such a step, or one for room.
    under_room: UnderRoom,
    /// The write limit's step in place ([`write_limit_step`]), counted from 0 at
    /// [`PROBE_AFTER`]: the window restarts at each.
    limit_step: Option<u32>,
}

/// The spans a room step is heard kept up with before the writer has the memory.high of the
/// forced rate ([`SpeedProbe::room_ramp`]).
///
/// Six, not three: the disk's queue takes most false rooms back one or two spans after the
/// step, and what the writer dirtied by then is what pauses the others. On 6.12's 30 MB/s disk
/// (stop 72, same session, copy and load offender) the committing load paused over 0.25 s in
/// 2 of 12 runs with three spans, after raises to 16-24 MiB (0.28, 0.40 s); with six the
/// raises stopped at 12-21 MiB, and the one run of 12 over (0.43 s) paused after its copy had
/// ended and been released. The 150 MB/s disk's rooms were kept on both kernels, its 400 MB
/// copy a little slower (docs/bench/speed-probe.md, "Stop 72").
const RAMP_SPANS: u32 = 6;

/// A probe's state before a step that forced the rate up for room: see
/// [`SpeedProbe::others_stalled`].
#[derive(Clone, Copy, Debug, PartialEq)]
struct BeforeRoom {
    forced: Option<u64>,
    room: bool,
    room_bound: Option<f64>,
    /// The rate the step went up from.
    top: f64,
}

/// A writer a window saw use too little of the rate it was held at to tell the disk's room, or
/// one that writes many small files ([`crate::detect::file_sizes`]): see [`Method::lightened`].
#[derive(Clone, Copy, Debug, PartialEq)]
enum Light {
    /// Seen so, not lightened (yet).
    Seen,
    /// Held by the weight and a light writer's memory.high: no more windows, whose verdict it
    /// cannot give (it uses too little of the rate) and under which its backlog, no longer
    /// bound by the held memory.high, is written at the kernel's latency control: the
    /// committing load's longest pause began in that second window in 2 of 3 6.12 runs, 0.21 s
    /// against 0.08 s (bench-light41b-tar).
    Lightened,
    /// Dirtied faster than the rate since: held at weight 1 again, for good, but with the light
    /// writer's memory.high (see [`SpeedProbe::turned_heavy`]).
    Heavy,
}

impl SpeedProbe {
    /// The probe of a restriction made at `bw` bytes per second on a disk where an earlier
    /// one's window showed no room at `no_room`, if one did: no window asks again at that rate.
    pub fn remembering(no_room: Option<f64>, bw: f64) -> SpeedProbe {
        let no_room = no_room.filter(|r| covered_by_no_room(bw, *r));
        SpeedProbe {
            no_room,
            remembered: no_room.is_some(),
            ..SpeedProbe::default()
        }
    }

    /// The earlier answer this probe holds the rate for instead of asking, if any.
    pub fn remembered(&self) -> Option<f64> {
        self.no_room.filter(|_| self.remembered)
    }

    /// What this restriction's probe learned of the disk's room, if anything.
    pub fn room_shown(&self) -> Option<Room> {
        if self.room {
            return Some(Room::Spare);
        }
        let rate = self.no_room.filter(|_| !self.remembered)?;
        Some(if self.taken_back {
            Room::TakenBackAt(rate)
        } else {
            Room::NoneAt(rate)
        })
    }

    /// The highest rate this restriction forced for the room a step showed, or forced after
    /// one (a quarter more) and then held for a whole step without the disk showing its speed,
    /// if any: a lower bound of the disk's speed
    /// ([`crate::detect::bandwidth::BandwidthEstimator::room_shown`]).
    ///
    /// The room step's own rate counts at once: the bench's 400 MB copy to the 150 MB/s disk
    /// ended within 5 s of its room step in 3 of 4 runs, and a rate that had to hold a whole
    /// step left nothing for the next copy, which paid again (0.31x against 0.52x from a kept
    /// 50 MB/s on 6.12). A window shows room the 30 MB/s disk does not have now and then; kept
    /// as a lower bound (50 MB/s), such a room costs the next copy there until the disk is
    /// measured under it (2.1-4.4 s in): the committing load paused 0.52-0.79 s on 6.1 and
    /// 0.19-0.32 s on 6.12, against 0.19-0.31 s without the bound (3 runs each,
    /// docs/bench/room-floor.md). A quarter more was not shown by the disk: it counts once it
    /// held.
    pub fn room_proven(&self) -> Option<f64> {
        self.room_bound
    }

    /// A probe whose last step forced the rate up to `rate`.
    #[cfg(test)]
    pub fn forced_at(rate: u64) -> SpeedProbe {
        SpeedProbe {
            forced: Some(rate),
            ..SpeedProbe::default()
        }
    }

    /// Whether the writer may be held as one that dirties less than its rate: a window saw it
    /// use too little of it, and it has not dirtied faster since.
    pub fn light(&self) -> bool {
        matches!(self.light, Some(Light::Seen | Light::Lightened))
    }

    /// The restriction's window was closed before its step (a release waiting for the
    /// backlog): what follows until the next step is no window, and judged as one (the held
    /// rate's short slices make every disk look roomy) it could force the rate up should the
    /// writer write again.
    pub fn close_window(&mut self) {
        self.listening = false;
    }

    /// Whether the last step forced the rate up for room, and the others' wait on I/O and the
    /// disk are to be heard ([`SpeedProbe::others_stalled`], [`SpeedProbe::hear`]) until the
    /// next step.
    ///
    /// Also while the writer's memory.high goes up under a quarter step
    /// ([`SpeedProbe::room_ramp`]): there the disk is heard for the ramp, and nothing is taken
    /// back.
    pub fn hears_others(&self) -> bool {
        self.before_room.is_some() || self.room_ramp().is_some()
    }

    /// What the last step forced the rate up for, while the disk is heard under it, for the
    /// daemon's log.
    pub fn forced_for(&self) -> &'static str {
        if self.quarter_from.is_some() {
            "a quarter up"
        } else {
            "for room"
        }
    }

    /// How far the writer's memory.high is on its way from the one it had when the last step
    /// forced the rate up ([`SpeedProbe::ramp_base`]) to that of the forced rate (0 to 1),
    /// while it is on the way: a step up each [`pressure::MIN_SPAN`] heard with the disk
    /// keeping up, over [`RAMP_SPANS`] of them; a span in which the disk queued, or in which the
    /// others waited [`OTHERS_FELT`] or more ([`SpeedProbe::others_waited`]), raises nothing.
    /// Every step that forces the rate up starts a way of its own, for room or a quarter more,
    /// from the held rate or from a forced one.
    ///
    /// Raised with the step, to a second of the forced rate, a false room's 30 MB/s disk
    /// queued the writer's 47 MB at once, and taken back, lowering it again to 8 MiB held the
    /// daemon 253 ms reclaiming 48 MB (stop 69's hearing runs). Held at the 8 MiB until the
    /// disk kept up, it did keep up, and queued once raised (stop 70). Under a quarter step
    /// from a held rate ([`RATE_FORCE_AFTER`]), raised at once, the 60 s load offender's
    /// memory.high went from 8 to 33-35 MiB and the committing load paused over 0.25 s 2-6
    /// times per run until the disk was measured 3-5 s later (stop 73); with the way up and
    /// the disk measured from a short queue (`detect::bandwidth`), 7 of 8 60 s runs kept every
    /// innocent within 0.25 s against 0 of 4 (docs/bench/speed-probe.md, "Stop 74").
    ///
    /// Until stop 76 the way up went on through later quarter steps as a share of the way from
    /// the held rate's memory.high to the newest step's, so each step raised it at once by
    /// the share of what the step added (a copy's 35 to 44 MiB at 48.8 MB/s), and a step for
    /// room from a forced rate, or a quarter after a room, had its own rate's at once (28 to
    /// 43 MiB, 41 to 59 MiB): 6 of the 7 committing-load pauses over 0.25 s in 24 runs of a
    /// 60 s copy began 0.6-1.8 s after such a raise (docs/bench/speed-probe.md, "Stop 76").
    pub fn room_ramp(&self) -> Option<f64> {
        let kept_up = self.under_room.kept_up;
        let forced_up = self.before_room.is_some() || self.quarter_from.is_some();
        (forced_up && kept_up < RAMP_SPANS).then(|| f64::from(kept_up) / f64::from(RAMP_SPANS))
    }

    /// The writer's memory.high the way up of [`SpeedProbe::room_ramp`] starts from: what it
    /// was when the last step forced the rate up, `current` at the first call under that step.
    pub fn ramp_base(&mut self, current: Option<u64>) -> Option<u64> {
        if self.ramp_base.is_none() {
            self.ramp_base = current;
        }
        self.ramp_base
    }

    /// The memory.high the writer keeps at most after a step for room was taken back, until
    /// the next step: the one it had at that step ([`SpeedProbe::ramp_base`]).
    ///
    /// The rate restored is a forced one, whose own memory.high the writer had not
    /// necessarily reached on its way up: restored with the rate, it raised memory.high just
    /// as the others were seen waiting, 24 to 32 MiB 0.14 s after a step for room on 6.12's 30
    /// MB/s disk, and the next quarter's way up started from there (stop 76, cpslow, r2).
    pub fn taken_back_to(&self) -> Option<u64> {
        self.taken_back_to
    }

    /// The disk was measured: nothing forced for room is to be taken back, nor memory.high
    /// raised on the way to a forced rate's, and the disk is no longer heard for them (a
    /// quarter step's way up went on logging spans after stop 74's disk measured itself).
    pub fn disk_measured(&mut self) {
        self.before_room = None;
        self.quarter_from = None;
        self.ramp_base = None;
        self.taken_back_to = None;
        self.under_room = UnderRoom::default();
    }

    /// How many spans the disk was heard keeping up under the last room step, and what it
    /// did over the last of them (bytes per second, writes in flight).
    pub fn kept_up(&self) -> (u32, (f64, f64)) {
        (self.under_room.kept_up, self.under_room.last_kept_up)
    }

    /// The cgroups beside the restriction waited on I/O `share` of the last span heard, told
    /// before the disk's reading of the same moment ([`SpeedProbe::hear`]): at [`OTHERS_FELT`]
    /// or more, while memory.high is on its way up ([`SpeedProbe::room_ramp`]), the span under
    /// way raises nothing. Returns whether this starts a hold (none since the last span
    /// counted), for the log.
    pub fn others_waited(&mut self, share: f64) -> bool {
        share >= OTHERS_FELT && self.room_ramp().is_some() && self.under_room.felt()
    }

    /// The cgroups beside the restriction waited on I/O `share` of the last span heard. When
    /// the last step forced the rate up for room and that is [`OTHERS_HURT`] or more, the room
    /// was not the disk's: the step is taken back (with the lower bound it proved), and a step
    /// up from a rate held without forcing leaves "no room" at that rate, as a window that
    /// showed the disk queuing would (kept for later restrictions only from a disk's
    /// [`TAKE_BACKS_KEPT`]th take-back, [`answer_to_keep`]). Returns why, for the daemon's log.
    pub fn others_stalled(&mut self, share: f64) -> Option<String> {
        if share < OTHERS_HURT {
            return None;
        }
        self.take_back(&format!(
            "others waited on I/O {:.0}% of the time",
            share * 100.0
        ))
    }

    /// The same for the disk's own counters: since the last step forced the rate up for room,
    /// a sample showed the disk with [`ROOM_QUEUED`] writes in flight or more while it
    /// completed less than the step's least. Returns why, for the daemon's log.
    pub fn disk_queued(&mut self) -> Option<String> {
        let (rate, queue) = self.under_room.queued.take()?;
        // Under a quarter step the queue is what measures the disk: nothing to take back.
        self.before_room?;
        self.take_back(&format!(
            "the disk queued {queue:.2} writes in flight completing {}",
            show_rate(rate)
        ))
    }

    /// Takes back the step that forced the rate up for room, for what was `seen` under it.
    fn take_back(&mut self, seen: &str) -> Option<String> {
        let before = self.before_room.take()?;
        self.under_room = UnderRoom::default();
        self.taken_back_to = self.ramp_base.take();
        let undone = self.forced.map_or(0.0, |f| f as f64);
        self.forced = before.forced;
        self.room = before.room;
        self.room_bound = before.room_bound;
        if before.forced.is_none() {
            self.no_room = Some(before.top);
            self.remembered = false;
            self.taken_back = true;
        }
        self.seen = format!(
            "the rate forced to {} for the room shown taken back: {seen} under it",
            show_rate(undone),
        );
        Some(format!(
            "{seen} under the rate forced to {} for the room the disk seemed to show: back to \
             {}{}",
            show_rate(undone),
            show_rate(before.forced.map_or(before.top, |f| f as f64)),
            if before.forced.is_none() {
                ", no room to spare at it"
            } else {
                ""
            }
        ))
    }

    /// A probe whose window saw the writer use too little of its rate, for tests elsewhere.
    #[cfg(test)]
    pub fn seen_light() -> SpeedProbe {
        SpeedProbe {
            light: Some(Light::Seen),
            ..SpeedProbe::default()
        }
    }

    /// The writer writes many small files (`why`): light, as a window would see it, unless it
    /// was seen otherwise first.
    pub fn saw_small_files(&mut self, why: impl FnOnce() -> String) {
        if self.light.is_none() {
            self.light = Some(Light::Seen);
            self.seen_as = format!("its writers write many small files ({})", why());
        }
    }

    /// Why the writer was seen light.
    pub fn seen_as(&self) -> &str {
        &self.seen_as
    }

    /// The writer is held at the light weight: no more windows.
    pub fn lightened(&mut self) {
        if self.light == Some(Light::Seen) {
            self.light = Some(Light::Lightened);
        }
    }

    /// Whether the writer is held as a light one now.
    pub fn is_lightened(&self) -> bool {
        self.light == Some(Light::Lightened)
    }

    /// The writer dirtied faster than the rate it is held at: held at weight 1 again, for the
    /// rest of the restriction.
    pub fn turned_heavy(&mut self) {
        self.light = Some(Light::Heavy);
    }

    /// Whether the writer was lightened (its memory.high raised), light still or not.
    pub fn lifted(&self) -> bool {
        matches!(self.light, Some(Light::Lightened | Light::Heavy))
    }

    /// Whether the writer was lightened and then dirtied faster than its rate: its cgroup holds
    /// what it dirtied meanwhile, and a memory.high written below that makes its writer, the
    /// daemon, reclaim it while the writer adds more: a copy that dumped 201 MB held the daemon
    /// 5 s at full CPU in that write (bench-light41b-cp, memory.high lifted while light). Held
    /// at weight 1 under the light writer's memory.high instead, which bounded what it dumped.
    pub fn heavy(&self) -> bool {
        self.light == Some(Light::Heavy)
    }

    /// What the disk did over a tick's sample, while the restriction holds.
    pub fn observe(&mut self, delta: &DiskDelta, seconds: f64) {
        self.window.add(delta, seconds);
        // Only a window's few: a restriction may hold for hours once the disk is measured.
        if self.listening {
            self.spans.add(delta, seconds);
        }
    }

    /// What the disk did over `seconds` since the last reading, heard while the last step
    /// forced the rate up for room ([`SpeedProbe::hears_others`]; ignored otherwise).
    pub fn hear(&mut self, delta: &DiskDelta, seconds: f64) {
        if let Some(top) = self.before_room.map(|b| b.top).or(self.quarter_from) {
            self.under_room.hear(delta, seconds, top);
        }
    }

    /// The restriction on a disk whose speed is still not known (assumed, or a lower bound)
    /// after it has held for `held`, and why, or `None` while it stays as it was made.
    pub fn step(
        &mut self,
        method: Method,
        estimate: Estimate,
        policy: &DevicePolicy,
        held: Duration,
    ) -> Option<(Method, String)> {
        let bw = estimate.bytes_per_sec;
        let known = if estimate.measured {
            format!("only known to be at least {}", show_rate(bw))
        } else {
            "not measured".to_string()
        };
        if !method.under_rate_control() {
            if held < PROBE_AFTER {
                return None;
            }
            // What the disk did under the limit before each step, logged with the step. Not
            // used to size the step as the rate control's are: the limit's pacing leaves no
            // queue, and the systemd bed's 31 MB/s disk kept 0.13-0.28 writes in flight under
            // 18.8 and 25 MB/s, as a fast disk would (docs/bench/commit-pause.md, "Stop 90").
            let step = limit_step_index(held);
            if self.limit_step != Some(step) {
                self.limit_step = Some(step);
                let window = std::mem::take(&mut self.window);
                self.seen = if window.seconds > 0.0 {
                    format!(
                        "over the {:.0}s before, the disk wrote {} with {:.2} writes in flight",
                        window.seconds,
                        show_rate(window.bytes as f64 / window.seconds),
                        window.writing / window.seconds
                    )
                } else {
                    "nothing seen before".to_string()
                };
            }
            return Some(write_limit_step(method, bw, &known, held, &self.seen));
        }
        if self.remembered && self.no_room.is_some_and(|r| !covered_by_no_room(bw, r)) {
            self.no_room = None;
            self.remembered = false;
        }
        if held < PROBE_AFTER - LISTEN {
            // Nor do the seconds in which the restriction began count (turning iocost on
            // freezes the disk's queue).
            self.restart_window();
            return None;
        }
        if held < PROBE_AFTER {
            // A lightened writer gets no window, this first one either: the untar lightened
            // for its files at once otherwise had one at 7 s (commit 0.16 s, 0.06 without).
            return (self.no_room.is_none() && self.light != Some(Light::Lightened))
                .then(|| self.listen(method, held));
        }
        let due = self
            .stepped
            .is_none_or(|at| held.saturating_sub(at) >= PROBE_STEP);
        if due {
            self.take_step(bw, held);
        }
        let next_step_in = self
            .stepped
            .map_or(Duration::ZERO, |at| (at + PROBE_STEP).saturating_sub(held));
        if self.forced.is_none()
            && self.steps < LISTENED_STEPS
            && self.no_room.is_none()
            && self.light != Some(Light::Lightened)
            && next_step_in <= LISTEN
        {
            return Some(self.listen(method, held));
        }
        let Some(forced) = self.forced else {
            // What the step saw, at the step.
            return due.then(|| {
                let why = format!(
                    "the disk's speed is {known} after {}s: the rate held at {} ({})",
                    held.as_secs(),
                    show_rate(bw),
                    self.seen
                );
                (method, why)
            });
        };
        let why = format!(
            "the disk's speed is {known} after {}s: the rate held at {} at least ({}), raised \
             every {}s until the disk shows its speed",
            held.as_secs(),
            show_rate(forced as f64),
            self.seen,
            PROBE_STEP.as_secs()
        );
        // memory.high from the assumed speed keeps the writer from using the forced rate: on
        // the 6.12 bed a writer under 32 MiB wrote 19-30 MB/s to a 150 MB/s disk with the rate
        // forced to 190 MB/s, and the disk was never measured. No more than `max_flush_seconds`
        // of it, though: it bounds the backlog when a step overshoots the disk, and 2.5 s of it
        // (6.12's fast disk: 0.38x against 0.30x) doubled 6.1's commit pause on the 30 MB/s
        // disk, 0.52-0.70 s against 0.29-0.32 s (docs/bench/speed-probe.md).
        let method = match policy
            .memory_high
            .bytes(forced as f64, policy.max_flush_seconds)
        {
            Some(m) => method.with_memory_high_at_least(m),
            None => method,
        };
        // The forced rate keeps the rate control's latency targets, with which its steps were
        // measured (stops 25-26).
        Some((method.listening().with_rate_at_least(forced), why))
    }

    /// The restriction for a window the next step is judged on, which starts here.
    fn listen(&mut self, method: Method, held: Duration) -> (Method, String) {
        if !std::mem::replace(&mut self.listening, true) {
            self.restart_window();
        }
        let at = self
            .stepped
            .map_or(PROBE_AFTER, |at| at + PROBE_STEP)
            .max(held);
        let why = format!(
            "the disk's speed is not known after {}s: its rate left to the kernel's latency \
             control until {}s, to see whether the disk has room",
            held.as_secs(),
            at.as_secs()
        );
        (method.listening(), why)
    }

    fn restart_window(&mut self) {
        self.window = Window::default();
        self.spans = Spans::default();
    }

    /// `rate` is a lower bound of the disk's speed ([`SpeedProbe::room_proven`]).
    fn bound_room_at(&mut self, rate: f64) {
        self.room_bound = Some(self.room_bound.map_or(rate, |r| r.max(rate)));
    }

    fn take_step(&mut self, bw: f64, held: Duration) {
        // Under the held rate's short slices every disk looks roomy ([`LISTEN`]): only a window
        // under the kernel's latency control, or under the forced rate, which is, tells.
        let listened = std::mem::take(&mut self.listening);
        let judged = listened || self.forced.is_some();
        self.steps += 1;
        // A step is taken only while the disk is not measured: the forced rate held for a
        // whole one without the disk showing its speed.
        if let Some(forced) = self.forced.filter(|_| self.room) {
            self.bound_room_at(forced as f64);
        }
        self.before_room = None;
        // Each step that forces the rate up starts its memory.high's way up afresh.
        self.quarter_from = None;
        self.ramp_base = None;
        self.taken_back_to = None;
        self.under_room = UnderRoom::default();
        let window = std::mem::take(&mut self.window);
        let spans = std::mem::take(&mut self.spans);
        // The fastest the disk was let write: the model (the assumed speed, or a lower bound
        // that moved it) until the rate was forced.
        let top = self.forced.map_or(bw, |f| (f as f64).max(bw));
        let busy_share = if self.forced.is_some() {
            ROOM_BUSY
        } else {
            LISTENED_BUSY
        };
        // A window's spans are judged one by one; the forced rate's steps were measured on
        // their average (the 150 MB/s disk doubling its room every 5 s).
        let slowest = spans.slowest(top, busy_share).filter(|_| listened);
        let span_busy = slowest.map_or(f64::INFINITY, Window::busy_speed);
        let room = window.room(top, busy_share, span_busy);
        // Said only where it changed what the average showed.
        let slowest = slowest.filter(|_| room != window.room(top, busy_share, f64::INFINITY));
        let seen = if window.seconds > 0.0 {
            format!(
                "{}it wrote {} with {:.2} writes in flight",
                slowest.map_or_else(String::new, |s| format!(
                    "its slowest {:.1}s completed {} with {:.2} writes in flight, in all ",
                    s.seconds,
                    show_rate(s.bytes as f64 / s.seconds),
                    s.writing / s.seconds,
                )),
                show_rate(window.bytes as f64 / window.seconds),
                window.writing / window.seconds,
            )
        } else {
            "nothing seen".to_string()
        };
        let next = match room.filter(|_| judged) {
            Some(next) => {
                self.seen = format!("{seen}: room to spare");
                self.before_room = Some(BeforeRoom {
                    forced: self.forced,
                    room: self.room,
                    room_bound: self.room_bound,
                    top,
                });
                self.room = true;
                self.bound_room_at(next);
                Some(next)
            }
            // Forced before 30 s only by room: a disk that had room once goes on a quarter at a
            // time without waiting for 30 s.
            None if self.forced.is_some() || held >= RATE_FORCE_AFTER => {
                self.seen = format!("{seen}: a quarter more");
                // A span is judged against the rate this step went up from, not the first
                // held one: under the second quarter (39 MB/s) the 30 MB/s disk completed
                // 32.5 MB/s with 0.91 writes in flight, over the first quarter's 31.2, and
                // counted as keeping up; memory.high went up twice more and the committing
                // load paused 0.30 s before the disk was measured (stop 75, cpslow, 6.12).
                self.quarter_from = Some(top);
                Some(QUARTER * top)
            }
            None if judged => {
                self.seen = if window.busy(top, busy_share) {
                    self.no_room = Some(top);
                    self.taken_back = false;
                    format!("{seen}: no room")
                } else {
                    if window.seconds >= ROOM_SECONDS
                        && !window.busy(top, LIGHT_BUSY)
                        && self.light.is_none()
                    {
                        self.light = Some(Light::Seen);
                        self.seen_as = "its writers used too little of the rate to tell".into();
                    }
                    format!("{seen}: too little of the rate used to tell")
                };
                None
            }
            None if self.remembered => {
                let at = self.no_room.map_or_else(String::new, show_rate);
                self.seen = format!("{seen}: no window, the disk showed no room at {at} before");
                None
            }
            None => {
                self.seen = format!("{seen}: not judged, no window");
                None
            }
        };
        if let Some(next) = next {
            self.forced = Some(next as u64);
        }
        self.stepped = Some(held);
    }
}

/// The write limit's step after `held` (at least [`PROBE_AFTER`]): 0 from then, one more
/// every [`PROBE_STEP`].
fn limit_step_index(held: Duration) -> u32 {
    (held.saturating_sub(PROBE_AFTER).as_secs_f64() / PROBE_STEP.as_secs_f64()) as u32
}

/// A write limit doubled every [`PROBE_STEP`] after [`PROBE_AFTER`], and lifted after
/// [`PROBE_DOUBLINGS`] doublings; `seen` is what the disk did before the step.
fn write_limit_step(
    method: Method,
    bw: f64,
    known: &str,
    held: Duration,
    seen: &str,
) -> (Method, String) {
    let step = limit_step_index(held);
    if step >= PROBE_DOUBLINGS {
        return (
            method.without_write_limit(),
            format!("the disk's speed is still not measured ({seen}): no write limit until it is"),
        );
    }
    let wbps = (bw * f64::from(1u32 << step)) as u64;
    let why = format!(
        "the disk's speed is {known} after {}s: writes at {}, doubled every {}s until it is \
         measured ({seen})",
        held.as_secs(),
        show_rate(wbps as f64),
        PROBE_STEP.as_secs()
    );
    (method.with_write_limit(wbps), why)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        act::{CgroupLimits, WriteControl, iocost},
        system::devices::DevId,
    };

    fn held_by(write: WriteControl) -> Method {
        Method::Cgroup(CgroupLimits {
            dev: DevId {
                major: 254,
                minor: 16,
            },
            write,
            memory_high: Some(crate::config::MemoryHigh::FLOOR),
        })
    }

    fn rate_control() -> Method {
        held_by(WriteControl::Weight {
            weight: 1,
            model: Some(iocost::Model::held(25_000_000)),
            fallback: 18_750_000,
        })
    }

    const MB: u64 = 1_000_000;
    const MIB: u64 = 1024 * 1024;

    fn policy() -> DevicePolicy {
        crate::config::Config::default().policy_for(None).clone()
    }

    fn memory_high(m: &Method) -> Option<u64> {
        match m {
            Method::Cgroup(l) => l.memory_high,
            _ => None,
        }
    }

    /// The probe's step with the shipped policy, under the rate control of the assumed disk.
    fn assumed(p: &mut SpeedProbe, held: Duration) -> Option<(Method, String)> {
        p.step(rate_control(), Estimate::ASSUMED, &policy(), held)
    }

    /// `seconds` seconds in which the disk completed `mbps` MB/s with `queued` writes in flight
    /// on average.
    fn run(p: &mut SpeedProbe, seconds: u32, mbps: u64, queued: f64) {
        for _ in 0..seconds {
            let second = DiskDelta {
                written: mbps * MB,
                write_ms: (queued * 1000.0) as u64,
                in_flight: 1,
            };
            p.observe(&second, 1.0);
            p.hear(&second, 1.0);
        }
    }

    fn at(s: u64) -> Duration {
        PROBE_AFTER + Duration::from_secs(s)
    }

    /// The window before the step at `step` (`at(step)`): the rate left to the kernel's latency
    /// control, the disk completing `mbps` MB/s with `queued` writes in flight; then the step.
    fn listened(p: &mut SpeedProbe, step: u64, mbps: u64, queued: f64) -> Option<(Method, String)> {
        let (m, why) = assumed(p, at(step) - LISTEN).unwrap();
        assert_eq!(m.rate_range(), Some((6_250_000, 25_000_000)), "{why}");
        assert!(
            why.contains(&format!(
                "its rate left to the kernel's latency control until {}s",
                at(step).as_secs()
            )),
            "{why}"
        );
        run(p, 3, mbps, queued);
        assumed(p, at(step))
    }

    /// The bed's 30 MB/s disk while it may burst at the 25 MB/s model: 19-26 MB/s with 0.4-1.6
    /// writes in flight (figures of both kernels). No room: the rate stays held at the model for
    /// 30 s, judged on one window in which it may burst, then it is forced up a quarter every
    /// 5 s.
    #[test]
    fn a_disk_that_queues_when_it_may_burst_is_forced_up_a_quarter_only_after_30_s() {
        let mut p = SpeedProbe::default();
        assert!(assumed(&mut p, at(0) / 2).is_none());
        // A step without room holds the rate, and says what it saw.
        let (m, why) = listened(&mut p, 0, 19, 0.39).unwrap();
        assert_eq!(m, rate_control(), "49 MB/s busy: no room");
        assert!(
            why.contains(
                "not measured after 10s: the rate held at 25.0 MB/s (it wrote 19.0 MB/s with \
                 0.39 writes in flight: no room)"
            ),
            "{why}"
        );
        run(&mut p, 2, 25, 0.1);
        assert!(assumed(&mut p, at(2) - Duration::from_millis(1)).is_none());
        // The writer used its rate and the disk queued: that is the answer, and no second
        // window asks again. The held rate's short slices take over until 30 s, and what they
        // show is not judged.
        assert!(assumed(&mut p, at(5) - LISTEN).is_none());
        for s in [5, 7, 10, 12, 15, 17] {
            run(&mut p, 1, 25, 0.1);
            match assumed(&mut p, at(s)) {
                None => assert!(s % 5 != 0, "{s}"),
                Some((m, why)) => {
                    assert_eq!(m, rate_control(), "{s}");
                    assert!(why.contains("not judged, no window"), "{s}: {why}");
                }
            }
        }
        run(&mut p, 3, 25, 1.4);
        let (m, why) = assumed(&mut p, at(20)).unwrap();
        assert_eq!(m.rate_range(), Some((31_250_000, 31_250_000)));
        // Forced, the rate is under the rate control's latency targets, not the held ones.
        assert!(
            matches!(m.vrate(), Some(iocost::Vrate::Adaptive { .. })),
            "{m:?}"
        );
        assert!(
            why.contains("not measured after 30s: the rate held at 31.2 MB/s at least (it wrote"),
            "{why}"
        );
        assert!(why.contains("a quarter more"), "{why}");
        // Between steps the forced rate holds.
        run(&mut p, 2, 30, 1.3);
        let (m, _) = assumed(&mut p, at(22)).unwrap();
        assert_eq!(m.rate_range(), Some((31_250_000, 31_250_000)));
        run(&mut p, 3, 30, 1.3);
        let (m, _) = assumed(&mut p, at(25)).unwrap();
        assert_eq!(m.rate_range(), Some((39_000_000, 39_000_000)));
    }

    /// A restriction on a disk whose window showed no room in an earlier restriction holds the
    /// rate without a window of its own; one that answers tells the engine, to be kept.
    #[test]
    fn an_earlier_no_room_spares_the_window() {
        let mut first = SpeedProbe::default();
        assert_eq!(first.room_shown(), None);
        listened(&mut first, 0, 19, 0.39).unwrap();
        assert_eq!(first.room_shown(), Some(Room::NoneAt(25e6)));
        assert_eq!(first.room_proven(), None);
        // Too little used: no answer to keep.
        let mut idle = SpeedProbe::default();
        listened(&mut idle, 0, 10, 0.39).unwrap();
        assert_eq!(idle.room_shown(), None);

        let mut next = SpeedProbe::remembering(Some(25e6), 25e6);
        assert_eq!(next.remembered(), Some(25e6));
        for s in 1..10 {
            run(&mut next, 1, 25, 0.1);
            assert!(assumed(&mut next, Duration::from_secs(s)).is_none(), "{s}");
        }
        run(&mut next, 1, 25, 0.1);
        let (m, why) = assumed(&mut next, at(0)).unwrap();
        assert_eq!(m, rate_control());
        assert!(
            why.contains(
                "the rate held at 25.0 MB/s (it wrote 25.0 MB/s with 0.10 writes in flight: no \
                 window, the disk showed no room at 25.0 MB/s before)"
            ),
            "{why}"
        );
        for s in [2, 4] {
            assert!(assumed(&mut next, at(s)).is_none(), "{s}");
        }
        // Not this restriction's answer: nothing new to keep.
        assert_eq!(next.room_shown(), None);
        // After 30 s the rate is forced a quarter, as after an answer of its own.
        run(&mut next, 3, 25, 1.4);
        let (m, why) = assumed(&mut next, at(20)).unwrap();
        assert_eq!(m.rate_range(), Some((31_250_000, 31_250_000)), "{why}");

        // The answer stands for a lower bound the held writer shows under a quarter above it,
        // and from the restriction's start at that bound, as on the bed's 30 MB/s disk.
        let mut bound = SpeedProbe::remembering(Some(25e6), 25e6);
        run(&mut bound, 11, 27, 0.1);
        let (_, why) = bound
            .step(
                rate_control(),
                Estimate {
                    bytes_per_sec: 26.9e6,
                    measured: true,
                    ..Estimate::ASSUMED
                },
                &policy(),
                at(0),
            )
            .unwrap();
        assert!(why.contains("no window, the disk showed no room"), "{why}");
        assert_eq!(bound.remembered(), Some(25e6));
        assert_eq!(
            SpeedProbe::remembering(Some(25e6), 26.9e6).remembered(),
            Some(25e6)
        );
        assert_eq!(
            SpeedProbe::remembering(Some(25e6), 23.7e6).remembered(),
            None
        );
        // An answer at another rate than this restriction holds rules nothing out.
        let mut higher = SpeedProbe::remembering(Some(20e6), 25e6);
        assert_eq!(higher.remembered(), None);
        listened(&mut higher, 0, 19, 0.39).unwrap();
        assert_eq!(higher.room_shown(), Some(Room::NoneAt(25e6)));
        let mut lower = SpeedProbe::remembering(Some(40e6), 25e6);
        let (m, _) = listened(&mut lower, 0, 25, 0.17).unwrap();
        assert_eq!(m.rate_range(), Some((50_000_000, 50_000_000)));
        assert_eq!(lower.room_shown(), Some(Room::Spare));
    }

    /// A kept answer stands for a day, then a restriction asks a window again.
    #[test]
    fn a_kept_answer_stands_for_a_day() {
        let since = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let kept = Some(NoRoom { rate: 25e6, since });
        let hour = Duration::from_secs(3600);
        assert_eq!(NoRoom::standing(kept, since), Some(25e6));
        assert_eq!(NoRoom::standing(kept, since + 23 * hour), Some(25e6));
        assert_eq!(NoRoom::standing(kept, since + 24 * hour), None);
        // A clock set back: still standing.
        assert_eq!(NoRoom::standing(kept, since - hour), Some(25e6));
        assert_eq!(NoRoom::standing(None, since), None);
    }

    /// A window closed before its step is not judged: a held rate's seconds would look roomy.
    #[test]
    fn a_window_closed_early_is_not_judged() {
        let mut p = SpeedProbe::default();
        let (m, _) = assumed(&mut p, at(0) - LISTEN).unwrap();
        assert_eq!(m.rate_range(), Some((6_250_000, 25_000_000)));
        p.close_window();
        run(&mut p, 3, 25, 0.1);
        let (m, why) = assumed(&mut p, at(0)).unwrap();
        assert_eq!(m, rate_control());
        assert!(why.contains("not judged, no window"), "{why}");
    }

    /// A writer a window saw use too little of its rate is light until it dirties faster
    /// (`Method::lightened`); a window it used, or one not judged, says nothing of it.
    #[test]
    fn a_writer_that_used_too_little_of_its_rate_is_light_until_it_turns_heavy() {
        let mut untar = SpeedProbe::default();
        assert!(!untar.light());
        let (_, why) = listened(&mut untar, 0, 8, 0.19).unwrap();
        assert!(why.contains("too little of the rate used to tell"), "{why}");
        assert!(untar.light());
        // Lightened: no second window.
        let mut light = untar.clone();
        light.lightened();
        assert!(light.light());
        run(&mut light, 2, 20, 0.5);
        assert!(assumed(&mut light, at(5) - LISTEN).is_none());
        let (m, _) = assumed(&mut light, at(5)).unwrap();
        assert_eq!(m, rate_control());
        // Seen so but not lightened (it dirties too fast): the second window as for anyone.
        let (m, _) = assumed(&mut untar.clone(), at(5) - LISTEN).unwrap();
        assert_eq!(m.rate_range(), Some((6_250_000, 25_000_000)));
        assert!(!untar.heavy() && !untar.lifted() && light.lifted());
        untar.turned_heavy();
        assert!(untar.heavy() && untar.lifted());
        untar.lightened();
        assert!(!untar.light());
        // For good: a later window that sees it use too little again does not make it light.
        listened(&mut untar, 5, 8, 0.19).unwrap();
        assert!(!untar.light());

        let mut copy = SpeedProbe::default();
        listened(&mut copy, 0, 19, 0.39).unwrap();
        assert!(!copy.light());
        // Short of the rate in its first window, not so far short as an untar: not light.
        let mut late = SpeedProbe::default();
        let (_, why) = listened(&mut late, 0, 14, 0.51).unwrap();
        assert!(why.contains("too little of the rate used to tell"), "{why}");
        assert!(!late.light());
        // Held rate only, no window (an earlier answer): nothing judged.
        let mut kept = SpeedProbe::remembering(Some(25e6), 25e6);
        run(&mut kept, 11, 8, 0.1);
        assumed(&mut kept, at(0)).unwrap();
        assert!(!kept.light());
    }

    /// A writer of many small files is light without a window (on a measured disk there is
    /// none), says so, and no window or later file makes a heavy one light again.
    #[test]
    fn a_writer_of_many_small_files_is_light_without_a_window() {
        let mut untar = SpeedProbe::default();
        untar.saw_small_files(|| "300 files a second, 32 KiB each".into());
        assert!(untar.light() && !untar.lifted());
        assert_eq!(
            untar.seen_as(),
            "its writers write many small files (300 files a second, 32 KiB each)"
        );
        // A window that then sees it use too little keeps the first reason.
        listened(&mut untar, 0, 8, 0.19).unwrap();
        assert!(untar.seen_as().contains("many small files"));
        untar.lightened();
        untar.turned_heavy();
        untar.saw_small_files(|| unreachable!("a heavy writer is not asked again"));
        assert!(!untar.light() && untar.heavy());

        let mut window = SpeedProbe::default();
        listened(&mut window, 0, 8, 0.19).unwrap();
        window.saw_small_files(|| unreachable!("seen light already"));
        assert_eq!(
            window.seen_as(),
            "its writers used too little of the rate to tell"
        );
    }

    /// A disk five times faster than assumed completes the model's 25 MB/s with a tenth of a
    /// write in flight when it may burst: forced up at the first step, doubling while it keeps
    /// such room, then a quarter at a time without waiting for 30 s.
    /// A window whose seconds are (MB/s, writes in flight), then its step.
    fn listened_by_second(p: &mut SpeedProbe, seconds: &[(u64, f64)]) -> (Method, String) {
        assumed(p, at(0) - LISTEN).unwrap();
        for &(mbps, queued) in seconds {
            p.observe(
                &DiskDelta {
                    written: mbps * MB,
                    write_ms: (queued * 1000.0) as u64,
                    in_flight: 1,
                },
                1.0,
            );
        }
        assumed(p, at(0)).unwrap()
    }

    /// Windows of stop 73's status bench (6.12's 30 MB/s disk, r0) and of stop 72's 150 MB/s
    /// disk (6.12, r0): their disk periods as the daemon logged them, to the MB/s.
    #[test]
    fn a_window_shows_room_only_if_each_of_its_spans_does() {
        let mut slow = SpeedProbe::default();
        let (m, why) = listened_by_second(&mut slow, &[(20, 0.08), (28, 0.69), (29, 0.14)]);
        assert_eq!(
            m,
            rate_control(),
            "25.7 MB/s with 0.30 on average, 41 MB/s busy at worst"
        );
        assert!(
            why.contains(
                "(its slowest 1.0s completed 28.0 MB/s with 0.69 writes in flight, in all it \
                 wrote 25.7 MB/s with 0.30 writes in flight: no room)"
            ),
            "{why}"
        );
        assert_eq!(slow.room_shown(), Some(Room::NoneAt(25e6)));
        // Out of a window its spans are not kept: a restriction may hold for hours.
        run(&mut slow, 30, 25, 0.2);
        assert_eq!(slow.spans, Spans::default());

        let mut fast = SpeedProbe::default();
        let (m, why) = listened_by_second(&mut fast, &[(24, 0.13), (32, 0.13), (25, 0.12)]);
        assert_eq!(m.rate_range(), Some((50_000_000, 50_000_000)), "{why}");
        assert!(!why.contains("slowest"), "the spans changed nothing: {why}");

        // A slower span lowers the step: 0.5 x 80 MB/s busy.
        let mut p = SpeedProbe::default();
        let (m, why) = listened_by_second(&mut p, &[(24, 0.13), (24, 0.3), (25, 0.12)]);
        assert_eq!(m.rate_range(), Some((40_000_000, 40_000_000)), "{why}");
        assert!(
            why.contains("its slowest 1.0s completed 24.0 MB/s with 0.30"),
            "{why}"
        );

        // A span in which the writer did not use its rate (asleep, the others' flushes queued)
        // says nothing of the disk.
        let mut p = SpeedProbe::default();
        let (m, why) = listened_by_second(&mut p, &[(30, 0.1), (5, 0.5), (33, 0.12), (30, 0.1)]);
        assert_eq!(m.rate_range(), Some((50_000_000, 50_000_000)), "{why}");
    }

    #[test]
    fn a_disk_with_room_to_spare_is_forced_up_at_once_and_faster() {
        let mut p = SpeedProbe::default();
        let (m, why) = listened(&mut p, 0, 25, 0.17).unwrap();
        assert_eq!(m.rate_range(), Some((50_000_000, 50_000_000)));
        assert_eq!(
            p.room_proven(),
            Some(50e6),
            "the room step's own rate, at once"
        );
        assert!(
            why.contains(
                "at least (it wrote 25.0 MB/s with 0.17 writes in flight: room to spare), raised \
                 every 5s"
            ),
            "{why}"
        );
        // memory.high follows: the default policy's max_flush_seconds of the forced rate, above
        // the 32 MiB the restriction was made with; the engine ramps it up to that as spans
        // under the step show the disk keeping up.
        assert_eq!(
            memory_high(&m),
            Some((50e6 * policy().max_flush_seconds) as u64)
        );
        assert!(memory_high(&m) > Some(crate::config::MemoryHigh::FLOOR));
        assert_eq!(p.room_ramp(), Some(0.0));
        p.hear(&DiskDelta::default(), 0.5);
        assert_eq!(p.room_ramp(), Some(0.0), "half a span");
        run(&mut p, 1, 50, 0.2);
        assert_eq!(p.room_ramp(), Some(1.0 / 6.0));
        // Forced: no more windows.
        run(&mut p, 1, 50, 0.2);
        let (m, _) = assumed(&mut p, at(2)).unwrap();
        assert_eq!(m.rate_range(), Some((50_000_000, 50_000_000)));
        assert_eq!(p.room_ramp(), Some(2.0 / 6.0), "a span after the last");
        run(&mut p, 3, 50, 0.2);
        assert_eq!(p.room_ramp(), Some(5.0 / 6.0), "one span short");
        run(&mut p, 1, 50, 0.2);
        assert_eq!(p.room_ramp(), None, "the way up done");
        let (m, _) = assumed(&mut p, at(5)).unwrap();
        assert_eq!(m.rate_range(), Some((100_000_000, 100_000_000)));
        assert_eq!(
            memory_high(&m),
            Some((100e6 * policy().max_flush_seconds) as u64)
        );
        assert_eq!(
            p.room_ramp(),
            Some(0.0),
            "room again, from a forced rate: a way of its own"
        );
        assert_eq!(p.room_proven(), Some(100e6), "forced for room again");
        // 150 MB/s of busy speed at 100 MB/s: half of it is no step of its own.
        run(&mut p, 5, 100, 0.67);
        let (m, _) = assumed(&mut p, at(10)).unwrap();
        assert_eq!(m.rate_range(), Some((125_000_000, 125_000_000)));
        assert_eq!(
            p.room_proven(),
            Some(100e6),
            "a quarter more is not shown yet"
        );
        run(&mut p, 5, 110, 1.2);
        assumed(&mut p, at(15)).unwrap();
        assert_eq!(
            p.room_proven(),
            Some(125e6),
            "a quarter more, held a whole step"
        );
        // A writer held by memory.high uses part of the forced rate: no room shown.
        let mut held = SpeedProbe::default();
        let (m, _) = listened(&mut held, 0, 20, 0.11).unwrap();
        assert_eq!(m.rate_range(), Some((50_000_000, 50_000_000)));
        run(&mut held, 5, 27, 0.12);
        let (m, why) = assumed(&mut held, at(5)).unwrap();
        assert_eq!(m.rate_range(), Some((62_500_000, 62_500_000)));
        assert!(why.contains("a quarter more"), "{why}");
        assert_eq!(held.room_proven(), Some(50e6));
        // Room may show at the second window only (6.12's writer at first used less).
        let mut late = SpeedProbe::default();
        let (m, _) = listened(&mut late, 0, 14, 0.1).unwrap();
        assert_eq!(m, rate_control());
        let (m, _) = listened(&mut late, 5, 20, 0.11).unwrap();
        assert_eq!(m.rate_range(), Some((50_000_000, 50_000_000)));
        // A few writes say little of the disk, and the next window asks again (an untar held
        // by iocost's debt wrote 3.5-6.4 MB/s of the 25 in its windows, docs/bench/tar-stop39.md).
        let mut idle = SpeedProbe::default();
        let (m, why) = listened(&mut idle, 0, 14, 0.05).unwrap();
        assert_eq!(m, rate_control());
        assert!(
            why.contains("(it wrote 14.0 MB/s with 0.05 writes in flight: too little of the rate used to tell)"),
            "{why}"
        );
        let (m, _) = listened(&mut idle, 5, 4, 0.1).unwrap();
        assert_eq!(m, rate_control());
        // Nor do the seconds before the window.
        let mut early = SpeedProbe::default();
        run(&mut early, 10, 25, 0.1);
        assert!(assumed(&mut early, at(0) / 3).is_none());
        run(&mut early, 1, 25, 0.1);
        let (m, _) = assumed(&mut early, at(0)).unwrap();
        assert_eq!(m, rate_control());
    }

    /// A write limit doubles every 5 s from 10 s, and is lifted after four doublings; each
    /// step says what the disk did under the limit since the one before.
    #[test]
    fn a_write_limit_doubles_then_goes() {
        let limited = held_by(WriteControl::Limit(18_750_000));
        let mut p = SpeedProbe::default();
        assert!(
            p.step(
                limited.clone(),
                Estimate::ASSUMED,
                &policy(),
                at(0) - Duration::from_secs(1)
            )
            .is_none(),
            "held as made until 10 s"
        );
        run(&mut p, 15, 19, 0.6);
        let (m, why) = p
            .step(limited.clone(), Estimate::ASSUMED, &policy(), at(5))
            .unwrap();
        assert_eq!(m.write_limit(), Some(50_000_000));
        assert!(
            why.contains("writes at 50.0 MB/s, doubled every 5s")
                && why.contains("over the 15s before, the disk wrote 19.0 MB/s with 0.60 writes"),
            "{why}"
        );
        // The same step at the next tick says the same: the window restarts at a step only.
        run(&mut p, 1, 30, 4.0);
        let (_, again) = p
            .step(limited.clone(), Estimate::ASSUMED, &policy(), at(6))
            .unwrap();
        assert!(again.contains("over the 15s before"), "{again}");
        run(&mut p, 3, 30, 4.0);
        let (m, why) = p
            .step(limited.clone(), Estimate::ASSUMED, &policy(), at(10))
            .unwrap();
        assert_eq!(m.write_limit(), Some(100_000_000));
        assert!(
            why.contains("over the 4s before, the disk wrote 30.0 MB/s with 4.00 writes"),
            "{why}"
        );
        let (m, _) = p
            .step(limited, Estimate::ASSUMED, &policy(), at(20))
            .unwrap();
        assert_eq!(m.write_limit(), Some(crate::act::method::NO_WRITE_LIMIT));
    }

    /// A lower bound of the disk's speed raises what the forced rate starts from.
    #[test]
    fn a_lower_bound_raises_the_forced_rate() {
        let floor = Estimate {
            bytes_per_sec: 40e6,
            source: "at least what it wrote for 5 s without a backlog",
            measured: true,
            capacity: false,
        };
        let mut p = SpeedProbe::default();
        run(&mut p, 5, 40, 1.6);
        let (m, why) = p.step(rate_control(), floor, &policy(), at(20)).unwrap();
        assert_eq!(m.rate_range(), Some((50_000_000, 50_000_000)));
        assert!(why.contains("only known to be at least 40.0 MB/s"), "{why}");
    }

    /// A take-back's "no room" is kept for later restrictions only from the second take-back
    /// on the disk; a window's at once; room to spare forgets it.
    #[test]
    fn a_first_take_back_is_not_kept_beyond_its_restriction() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let kept = |rate: f64| NoRoom { rate, since: now };
        let taken_back = Some(Room::TakenBackAt(25e6));
        assert_eq!(answer_to_keep(taken_back, None, 1, now), None);
        assert_eq!(
            answer_to_keep(taken_back, None, 2, now),
            Some(Some(kept(25e6)))
        );
        let window = Some(Room::NoneAt(25e6));
        assert_eq!(answer_to_keep(window, None, 0, now), Some(Some(kept(25e6))));
        // The same answer again leaves the kept one (and its age) as it is, unless it lapsed.
        let earlier = NoRoom {
            rate: 25e6,
            since: now - Duration::from_secs(3600),
        };
        assert_eq!(answer_to_keep(window, Some(earlier), 0, now), None);
        assert_eq!(answer_to_keep(taken_back, Some(earlier), 2, now), None);
        let lapsed = NoRoom {
            since: now - NO_ROOM_KEPT,
            ..earlier
        };
        assert_eq!(
            answer_to_keep(window, Some(lapsed), 0, now),
            Some(Some(kept(25e6)))
        );
        // A first take-back leaves a kept answer standing, room to spare forgets it.
        assert_eq!(answer_to_keep(taken_back, Some(earlier), 1, now), None);
        assert_eq!(
            answer_to_keep(Some(Room::Spare), Some(earlier), 0, now),
            Some(None)
        );
        assert_eq!(answer_to_keep(Some(Room::Spare), None, 0, now), None);
        assert_eq!(answer_to_keep(None, Some(earlier), 2, now), None);
    }

    #[test]
    fn a_room_step_that_leaves_the_others_waiting_is_taken_back() {
        // The bed's 30 MB/s disk, one of its false rooms (stop 48: 15.3 MB/s with 0.18 in
        // flight): forced to 41 MB/s.
        let mut p = SpeedProbe::default();
        let (m, _) = listened(&mut p, 0, 15, 0.18).unwrap();
        let (forced, _) = m.rate_range().unwrap();
        assert!((40_000_000..45_000_000).contains(&forced), "{forced}");
        assert!(p.hears_others());
        assert_eq!(p.others_stalled(0.10), None, "a fast disk's forced step");
        assert!(p.hears_others(), "under the mark: still heard");
        let why = p.others_stalled(0.23).unwrap();
        assert!(
            why.contains("back to 25.0 MB/s, no room to spare at it"),
            "{why}"
        );
        assert!(!p.hears_others());
        assert_eq!(
            p.room_proven(),
            None,
            "the room it proved is taken back too"
        );
        assert_eq!(p.room_shown(), Some(Room::TakenBackAt(25e6)));
        // Held at the model, without another window, until rates are forced at 30 s.
        run(&mut p, 2, 25, 1.0);
        assert_eq!(assumed(&mut p, at(2)), None);
        run(&mut p, 3, 25, 1.0);
        let (m, why) = assumed(&mut p, at(5)).unwrap();
        assert_eq!(m, rate_control(), "{why}");
        assert!(why.contains("the rate held at 25.0 MB/s"), "{why}");
        // Only the step that forced for room is heard: a later one is not.
        run(&mut p, 5, 25, 1.0);
        assert!(assumed(&mut p, at(10)).is_some());
        assert!(!p.hears_others());

        // A room step up from a rate already forced for room goes back to that rate.
        let mut fast = SpeedProbe::default();
        listened(&mut fast, 0, 25, 0.17).unwrap();
        run(&mut fast, 5, 50, 0.2);
        let (m, _) = assumed(&mut fast, at(5)).unwrap();
        assert_eq!(m.rate_range(), Some((100_000_000, 100_000_000)));
        let why = fast.others_stalled(0.5).unwrap();
        assert!(why.contains("back to 50.0 MB/s"), "{why}");
        assert!(!why.contains("no room"), "{why}");
        assert_eq!(fast.room_proven(), Some(50e6));
        assert_eq!(fast.room_shown(), Some(Room::Spare));
        let (m, _) = assumed(&mut fast, at(6)).unwrap();
        assert_eq!(m.rate_range(), Some((50_000_000, 50_000_000)));
    }

    /// Heard every 250 ms, the disk's queue under a room step is judged over the last 750 ms
    /// at each reading: a queue that builds in the second half of the first second is taken
    /// back at 1.25 s, where whole seconds judged the first second clean and waited for 2 s.
    #[test]
    fn a_queue_under_a_room_step_is_judged_over_the_last_span_at_each_reading() {
        let mut p = SpeedProbe::default();
        listened(&mut p, 0, 21, 0.23).unwrap();
        let reading = |p: &mut SpeedProbe, queued: f64| {
            p.hear(
                &DiskDelta {
                    written: 7 * MB,
                    write_ms: (queued * 250.0) as u64,
                    in_flight: 1,
                },
                0.25,
            );
            p.disk_queued()
        };
        for queued in [0.2, 0.2, 0.2, 0.9] {
            assert_eq!(reading(&mut p, queued), None, "{queued}");
        }
        let why = reading(&mut p, 0.9).unwrap();
        assert!(
            why.starts_with("the disk queued 0.67 writes in flight completing 28.0 MB/s"),
            "{why}"
        );
        // Not heard once no step forced the rate up for room.
        let mut q = SpeedProbe::default();
        for _ in 0..8 {
            assert_eq!(reading(&mut q, 3.0), None);
        }
    }

    /// Stop 73's 60 s load offender on the 30 MB/s disk: no room at 10 s, the rate held at the
    /// model until 30 s, then forced a quarter up from it. The writer's memory.high goes up
    /// from the held rate's a sixth per span the disk keeps up, through the quarter steps that
    /// follow; a span in which the disk queued (what measures it) raises nothing and takes
    /// nothing back.
    #[test]
    fn a_quarter_step_from_the_held_rate_raises_memory_high_as_the_disk_keeps_up() {
        let mut p = SpeedProbe::default();
        listened(&mut p, 0, 19, 0.39).unwrap();
        for s in 1..20 {
            run(&mut p, 1, 25, 0.1);
            assumed(&mut p, at(s));
            assert_eq!(p.room_ramp(), None, "held, not forced: {s}");
            assert!(!p.hears_others(), "{s}");
        }
        run(&mut p, 1, 25, 0.1);
        let (m, why) = assumed(&mut p, at(20)).unwrap();
        assert!(why.contains("a quarter more"), "{why}");
        assert_eq!(m.rate_range(), Some((31_250_000, 31_250_000)));
        assert_eq!(p.room_ramp(), Some(0.0), "not heard yet");
        assert!(p.hears_others());
        assert_eq!(p.forced_for(), "a quarter up");
        run(&mut p, 1, 27, 0.3);
        assert_eq!(p.room_ramp(), Some(1.0 / 6.0), "a span that kept up");
        // The stop 73 runs' disk periods after the step: 29-30 MB/s with 1-4 in flight.
        run(&mut p, 1, 29, 1.2);
        assert_eq!(p.disk_queued(), None, "the measurement, not a false room");
        assert_eq!(
            p.room_ramp(),
            Some(1.0 / 6.0),
            "a queued span raises nothing"
        );
        assert_eq!(p.others_stalled(0.5), None);
        assert_eq!(
            p.room_shown(),
            Some(Room::NoneAt(25e6)),
            "the window's answer stands"
        );
        assert!(p.forced.is_some());
        run(&mut p, 3, 29, 1.2);
        assert_eq!(p.room_ramp(), Some(1.0 / 6.0), "the disk queued on");
        // The next quarter, from the forced rate, starts a way of its own from where this one's
        // got to (the engine's [`SpeedProbe::ramp_base`]).
        let (m, _) = assumed(&mut p, at(25)).unwrap();
        assert_eq!(m.rate_range(), Some((39_000_000, 39_000_000)));
        assert_eq!(p.room_ramp(), Some(0.0));
        assert!(p.hears_others());
        // Over the first quarter's rate but under this one's, with a queue: the disk held the
        // writer, not the rate (stop 75's 6.12 copy: 32.5 MB/s with 0.91 in flight).
        run(&mut p, 1, 32, 0.9);
        assert_eq!(
            p.room_ramp(),
            Some(0.0),
            "queued under the second quarter: raises nothing"
        );
        for spans in 1..6 {
            run(&mut p, 1, 27, 0.3);
            assert_eq!(p.room_ramp(), Some(f64::from(spans) / 6.0));
        }
        run(&mut p, 1, 27, 0.3);
        assert_eq!(p.room_ramp(), None, "the way up done");
        assert!(!p.hears_others());
        // The quarter after that goes up its own way too.
        let (m, _) = assumed(&mut p, at(30)).unwrap();
        assert_eq!(m.rate_range(), Some((48_750_000, 48_750_000)));
        assert_eq!(p.room_ramp(), Some(0.0));
        assert!(p.hears_others());
    }

    /// Stop 75's 6.1 copies that kept their room: the writer used half of the forced 50 MB/s
    /// (24.2 MB/s with 0.10-0.24 writes in flight), and the quarter after it raised memory.high
    /// from 41 to 59 MiB at once. Every step up now starts a way of its own from the
    /// memory.high the writer has at the step.
    #[test]
    fn every_step_up_raises_memory_high_from_the_one_the_writer_has() {
        let mut p = SpeedProbe::default();
        let (m, _) = listened(&mut p, 0, 24, 0.10).unwrap();
        assert_eq!(m.rate_range(), Some((50_000_000, 50_000_000)));
        assert_eq!(p.room_ramp(), Some(0.0));
        assert_eq!(
            p.ramp_base(Some(8 * MIB)),
            Some(8 * MIB),
            "the held rate's, at the step"
        );
        run(&mut p, 1, 24, 0.2);
        assert_eq!(p.room_ramp(), Some(1.0 / 6.0));
        assert_eq!(
            p.ramp_base(Some(14 * MIB)),
            Some(8 * MIB),
            "kept for the step's whole way"
        );
        run(&mut p, 5, 24, 0.2);
        assert_eq!(p.room_ramp(), None, "the room's way up done");
        let (m, why) = assumed(&mut p, at(5)).unwrap();
        assert!(why.contains("a quarter more"), "{why}");
        assert_eq!(m.rate_range(), Some((62_500_000, 62_500_000)));
        assert_eq!(p.room_ramp(), Some(0.0), "a way of its own");
        assert_eq!(
            p.ramp_base(Some(47 * MIB)),
            Some(47 * MIB),
            "from the room's"
        );
        assert_eq!(p.forced_for(), "a quarter up");
        assert!(p.hears_others());
        run(&mut p, 1, 24, 0.2);
        assert_eq!(p.room_ramp(), Some(1.0 / 6.0), "a span that kept up");
        run(&mut p, 1, 29, 1.2);
        assert_eq!(p.disk_queued(), None, "the measurement: nothing taken back");
        assert_eq!(p.others_stalled(0.5), None);
        assert_eq!(
            p.room_ramp(),
            Some(1.0 / 6.0),
            "a queued span raises nothing"
        );
        assert_eq!(p.room_proven(), Some(50e6), "the room stands");
        // The next quarter starts again from where this one's way got to.
        run(&mut p, 3, 29, 1.2);
        let (m, _) = assumed(&mut p, at(10)).unwrap();
        assert_eq!(m.rate_range(), Some((78_000_000, 78_000_000)));
        assert_eq!(p.room_ramp(), Some(0.0));
        assert_eq!(p.ramp_base(Some(49 * MIB)), Some(49 * MIB));
        p.disk_measured();
        assert_eq!(p.room_ramp(), None);
        assert!(!p.hears_others());
    }

    /// Stop 76's 60 s copies on the 30 MB/s disk: under a false room the disk kept up (21-24
    /// MB/s, 0.10-0.38 writes in flight) while the others' wait rose to 5-14% as memory.high
    /// went up to 41 MiB. A span in which they wait 5% or more raises nothing; the next counts
    /// from the reading after.
    #[test]
    fn memory_high_holds_on_its_way_while_the_others_wait() {
        let mut p = SpeedProbe::default();
        listened(&mut p, 0, 24, 0.10).unwrap();
        assert_eq!(p.room_ramp(), Some(0.0));
        // Heard every 250 ms, as the engine does: the others, then the disk.
        let reading = |p: &mut SpeedProbe, others: f64| {
            let started = p.others_waited(others);
            p.hear(
                &DiskDelta {
                    written: 6 * MB,
                    write_ms: 50,
                    in_flight: 1,
                },
                0.25,
            );
            started
        };
        for _ in 0..3 {
            assert!(!reading(&mut p, 0.01));
        }
        assert_eq!(
            p.room_ramp(),
            Some(1.0 / 6.0),
            "a span the others did not feel"
        );
        assert!(reading(&mut p, 0.08), "a hold starts");
        assert!(!reading(&mut p, 0.09), "and goes on");
        assert!(!reading(&mut p, 0.01));
        assert!(!reading(&mut p, 0.01));
        assert_eq!(p.room_ramp(), Some(1.0 / 6.0), "held");
        assert!(!reading(&mut p, 0.01));
        assert_eq!(
            p.room_ramp(),
            Some(2.0 / 6.0),
            "three readings after the last they waited in"
        );
        assert_eq!(
            p.others_stalled(0.08),
            None,
            "felt is not hurt: nothing taken back"
        );
        assert!(reading(&mut p, 0.06), "a new hold after a span counted");
        // Once on its way's end, or with nothing forced, their wait holds nothing.
        let mut held = SpeedProbe::default();
        assert!(!held.others_waited(0.5));
    }

    /// Stop 76's 6.12 copy (cpslow, r2): a step for room from a forced rate, taken back 0.14 s
    /// after it, restored that rate with its whole memory.high, 24 to 32 MiB, as the others
    /// were seen waiting. The writer keeps what it had at the step until the next one.
    #[test]
    fn a_step_for_room_taken_back_keeps_the_memory_high_it_had() {
        let mut p = SpeedProbe::default();
        listened(&mut p, 0, 25, 0.17).unwrap();
        assert_eq!(p.ramp_base(Some(8 * MIB)), Some(8 * MIB));
        run(&mut p, 5, 50, 0.2);
        let (m, _) = assumed(&mut p, at(5)).unwrap();
        assert_eq!(m.rate_range(), Some((100_000_000, 100_000_000)));
        assert_eq!(p.taken_back_to(), None);
        assert_eq!(p.ramp_base(Some(24 * MIB)), Some(24 * MIB), "at the step");
        p.others_stalled(0.23).unwrap();
        assert_eq!(p.taken_back_to(), Some(24 * MIB));
        assert_eq!(p.room_ramp(), None, "no way up under the rate restored");
        let (m, why) = assumed(&mut p, at(6)).unwrap();
        assert_eq!(m.rate_range(), Some((50_000_000, 50_000_000)));
        assert!(
            memory_high(&m).is_some_and(|h| h > 24 * MIB),
            "the restored rate's own, which the engine caps: {why}"
        );
        assert_eq!(p.taken_back_to(), Some(24 * MIB), "until the next step");
        run(&mut p, 4, 30, 0.2);
        let (m, why) = assumed(&mut p, at(10)).unwrap();
        assert!(why.contains("a quarter more"), "{why}");
        assert_eq!(m.rate_range(), Some((62_500_000, 62_500_000)));
        assert_eq!(p.taken_back_to(), None);
        assert_eq!(
            p.ramp_base(Some(24 * MIB)),
            Some(24 * MIB),
            "its way from there"
        );
    }

    /// Stop 65's false room on 6.1 (20.9 MB/s with 0.23 in flight, forced to 46 MB/s): the
    /// disk then completed 26 MB/s with 0.78 writes in flight, a second before the others
    /// waited and the committing load paused 0.50 s.
    #[test]
    fn a_room_step_the_disk_queues_under_is_taken_back_at_once() {
        let mut p = SpeedProbe::default();
        let (m, _) = listened(&mut p, 0, 21, 0.23).unwrap();
        let (forced, _) = m.rate_range().unwrap();
        assert!((40_000_000..50_000_000).contains(&forced), "{forced}");
        assert_eq!(p.room_ramp(), Some(0.0), "not heard yet");
        assert_eq!(p.disk_queued(), None, "nothing seen under it yet");
        // A short reading is not judged alone: 50 ms with 2 writes in flight, then the rest
        // of the second with a short queue.
        p.hear(
            &DiskDelta {
                written: MB,
                write_ms: 100,
                in_flight: 2,
            },
            0.05,
        );
        assert_eq!(p.disk_queued(), None);
        p.hear(
            &DiskDelta {
                written: 24 * MB,
                write_ms: 190,
                in_flight: 0,
            },
            0.95,
        );
        assert_eq!(p.disk_queued(), None, "0.2 in flight over the 0.95 s");
        assert_eq!(p.room_ramp(), Some(1.0 / 6.0), "a span that kept up");
        assert_eq!(p.kept_up().0, 1);
        // The 150 MB/s disk under its forced rate: a short queue, or more than the step's least.
        run(&mut p, 1, 27, 0.25);
        run(&mut p, 1, 21, 0.36);
        run(&mut p, 1, 35, 0.6);
        assert_eq!(p.disk_queued(), None);
        assert!(p.hears_others());
        run(&mut p, 1, 26, 0.78);
        let why = p.disk_queued().unwrap();
        assert!(
            why.starts_with("the disk queued 0.78 writes in flight completing 26.0 MB/s under the rate forced to"),
            "{why}"
        );
        assert!(
            why.contains("back to 25.0 MB/s, no room to spare at it"),
            "{why}"
        );
        assert!(!p.hears_others());
        assert_eq!(p.room_shown(), Some(Room::TakenBackAt(25e6)));
        assert_eq!(p.disk_queued(), None, "taken back once");
        // A queue after the take-back, or under a step not for room, takes nothing back.
        run(&mut p, 1, 24, 3.1);
        assert_eq!(p.disk_queued(), None);
        assert_eq!(p.others_stalled(0.5), None);
        // Nor does one seen under an earlier step count against a later one.
        let mut q = SpeedProbe::default();
        listened(&mut q, 0, 25, 0.17).unwrap();
        run(&mut q, 1, 20, 0.9);
        run(&mut q, 4, 60, 0.2);
        let (m, why) = assumed(&mut q, at(5)).unwrap();
        assert!(m.rate_range().unwrap().0 > 62_500_000, "{why}");
        assert!(q.hears_others(), "another step for room: {why}");
        assert_eq!(q.disk_queued(), None);
    }
}
