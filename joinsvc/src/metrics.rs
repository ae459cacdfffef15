//! joinsvc's counters and their Prometheus text form.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::ledger::{Bucket, FirstTicketRate, RateLimited, SourceClass, fill};

use confboot_appraisal::ear::Status;
use confboot_net::ServerStats;

/// Upper bounds (seconds) of the ticket latency histogram's buckets.
pub const LATENCY_BUCKETS: [f64; 12] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
];

/// Most (status, set) pairs counted apart in `joinsvc_admissions_total`;
/// later ones are counted under the set `other`.
pub const MAX_ADMISSION_LABELS: usize = 256;

/// Everything joinsvc counts.
#[derive(Default)]
pub struct Metrics {
    /// Join tickets issued.
    pub join_tickets: AtomicU64,
    /// Rejoin tickets issued.
    pub rejoin_tickets: AtomicU64,
    refused: Mutex<BTreeMap<&'static str, u64>>,
    /// TLS handshakes that failed (attestation refused, protocol errors).
    pub handshake_failures: AtomicU64,
    latency: Mutex<Histogram>,
    set_admissions: Mutex<BTreeMap<(&'static str, String), u64>>,
    rpc: Mutex<Option<Arc<ServerStats>>>,
    admissions: Mutex<BTreeMap<Status, u64>>,
    /// The rate of first tickets per source class
    /// ([`crate::ledger::FirstTicketRate`]), on this process's monotonic
    /// clock.
    pub first_tickets: FirstTickets,
}

/// The first-ticket rate of this process: the buckets and the monotonic
/// clock they run on (the guest's monotonic clock: a host that runs it
/// fast refills sooner, at most at the rate the clock runs).
pub struct FirstTickets {
    rate: Mutex<FirstTicketRate>,
    started: Instant,
}

impl Default for FirstTickets {
    fn default() -> FirstTickets {
        FirstTickets {
            rate: Mutex::new(FirstTicketRate::default()),
            started: Instant::now(),
        }
    }
}

impl FirstTickets {
    fn now(&self) -> u64 {
        self.started.elapsed().as_secs()
    }

    /// Whether `class` may have a first ticket now
    /// ([`FirstTicketRate::check`]).
    pub fn check(&self, class: SourceClass) -> Result<(), RateLimited> {
        let now = self.now();
        self.rate
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .check(class, now)
    }

    /// Counts a first ticket issued to `class` ([`FirstTicketRate::take`]).
    pub fn take(&self, class: SourceClass) {
        let now = self.now();
        self.rate
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take(class, now);
    }

    /// Every class's label and bucket.
    fn buckets(&self) -> Vec<(String, Bucket)> {
        self.rate
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .buckets()
            .map(|(c, b)| (c.label(), *b))
            .collect()
    }
}

#[derive(Default)]
struct Histogram {
    counts: [u64; LATENCY_BUCKETS.len()],
    sum: f64,
    count: u64,
}

impl Metrics {
    /// Counts a refused ticket under `reason`.
    pub fn refused(&self, reason: &'static str) {
        *self
            .refused
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(reason)
            .or_default() += 1;
    }

    /// Counts an admission decision by its attestation-result status.
    pub fn admission(&self, status: Status) {
        *self
            .admissions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(status)
            .or_default() += 1;
    }

    /// Counts a node admitted by the reference-value set `set` with
    /// `status` (`affirming` or `warning`).
    pub fn admitted(&self, status: &'static str, set: &str) {
        let mut admissions = self
            .set_admissions
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let mut key = (status, set.to_string());
        if !admissions.contains_key(&key) && admissions.len() >= MAX_ADMISSION_LABELS {
            key.1 = "other".into();
        }
        *admissions.entry(key).or_default() += 1;
    }

    /// Records how long issuing a ticket took.
    pub fn observe_latency(&self, d: Duration) {
        let secs = d.as_secs_f64();
        let mut h = self.latency.lock().unwrap_or_else(|p| p.into_inner());
        for (i, bound) in LATENCY_BUCKETS.iter().enumerate() {
            if secs <= *bound {
                h.counts[i] += 1;
            }
        }
        h.sum += secs;
        h.count += 1;
    }

    /// Adds the RPC server's connection counters to the output.
    pub fn attach_rpc_stats(&self, stats: Arc<ServerStats>) {
        *self.rpc.lock().unwrap_or_else(|p| p.into_inner()) = Some(stats);
    }

    /// The Prometheus text exposition (format 0.0.4).
    pub fn render(&self) -> String {
        let mut out = String::new();
        let counter = |out: &mut String, name: &str, help: &str, v: u64| {
            let _ = write!(
                out,
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {v}\n"
            );
        };
        let tickets = "joinsvc_tickets_issued_total";
        let _ = write!(
            out,
            "# HELP {tickets} Tickets issued.\n# TYPE {tickets} counter\n"
        );
        let _ = writeln!(
            out,
            "{tickets}{{kind=\"join\"}} {}",
            self.join_tickets.load(Ordering::Relaxed)
        );
        let _ = writeln!(
            out,
            "{tickets}{{kind=\"rejoin\"}} {}",
            self.rejoin_tickets.load(Ordering::Relaxed)
        );
        let refused = "joinsvc_tickets_refused_total";
        let _ = write!(
            out,
            "# HELP {refused} Ticket requests refused, by reason.\n# TYPE {refused} counter\n"
        );
        for (reason, n) in self
            .refused
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
        {
            let _ = writeln!(out, "{refused}{{reason=\"{reason}\"}} {n}");
        }
        let admissions = "confboot_joinsvc_admissions_total";
        let _ = write!(
            out,
            "# HELP {admissions} Admission decisions, by attestation-result status (EAR).\n\
             # TYPE {admissions} counter\n"
        );
        let counted = self
            .admissions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        for status in Status::ALL {
            let n = counted.get(&status).copied().unwrap_or(0);
            let _ = writeln!(out, "{admissions}{{status=\"{status}\"}} {n}");
        }
        let by_set = self
            .set_admissions
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if !by_set.is_empty() {
            let name = "joinsvc_set_admissions_total";
            let _ = write!(
                out,
                "# HELP {name} Nodes admitted by a reference-value set, by status and set.\n# TYPE {name} counter\n"
            );
            for ((status, set), n) in by_set.iter() {
                let set = set.replace('\\', "\\\\").replace('"', "\\\"");
                let _ = writeln!(out, "{name}{{status=\"{status}\",set=\"{set}\"}} {n}");
            }
        }
        drop(by_set);
        counter(
            &mut out,
            "joinsvc_handshake_failures_total",
            "TLS handshakes that failed (attestation refused, protocol errors).",
            self.handshake_failures.load(Ordering::Relaxed),
        );
        let h = self.latency.lock().unwrap_or_else(|p| p.into_inner());
        let name = "joinsvc_ticket_duration_seconds";
        let _ = write!(
            out,
            "# HELP {name} Time to issue a ticket.\n# TYPE {name} histogram\n"
        );
        for (bound, n) in LATENCY_BUCKETS.iter().zip(h.counts) {
            let _ = writeln!(out, "{name}_bucket{{le=\"{bound}\"}} {n}");
        }
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {}", h.count);
        let _ = writeln!(out, "{name}_sum {}", h.sum);
        let _ = writeln!(out, "{name}_count {}", h.count);
        drop(h);
        if let Some(s) = self.rpc.lock().unwrap_or_else(|p| p.into_inner()).as_ref() {
            for (name, help, v) in [
                (
                    "joinsvc_connections_accepted_total",
                    "Connections handed to a worker.",
                    &s.accepted,
                ),
                (
                    "joinsvc_connections_refused_total",
                    "Connections closed because every worker was busy.",
                    &s.refused,
                ),
                (
                    "joinsvc_connections_served_total",
                    "Connections whose serving ended.",
                    &s.served,
                ),
                (
                    "joinsvc_connections_gate_closed_total",
                    "Connections closed before a worker saw them: no whole ClientHello in time, \
                     not a ClientHello, or evicted.",
                    &s.gate_closed,
                ),
                (
                    "joinsvc_connections_evicted_total",
                    "Connections waiting for their ClientHello evicted for newer ones.",
                    &s.evicted,
                ),
                (
                    "joinsvc_connections_preempted_total",
                    "Connections shut, with every worker busy, after waiting longest for their peer.",
                    &s.preempted,
                ),
            ] {
                counter(&mut out, name, help, v.load(Ordering::Relaxed));
            }
        }
        self.render_ledger(&mut out);
        out
    }

    /// The first-ticket rate per source class and the ledger's fill, with
    /// their alarms.
    fn render_ledger(&self, out: &mut String) {
        let buckets = self.first_tickets.buckets();
        for (name, help, kind, value) in [
            (
                "joinsvc_first_tickets_total",
                "First tickets (joins, SEV-SNP launches) issued, by source class.",
                "counter",
                (|b: &Bucket| b.taken) as fn(&Bucket) -> u64,
            ),
            (
                "joinsvc_first_tickets_rate_limited_total",
                "First tickets refused by their source class's rate, by source class.",
                "counter",
                |b: &Bucket| b.refused,
            ),
            (
                "joinsvc_first_tickets_left",
                "First tickets a source class may take before its rate refuses.",
                "gauge",
                |b: &Bucket| b.left,
            ),
            (
                "joinsvc_first_tickets_alarm",
                "1 when a source class spent half its first-ticket burst (before any refusal).",
                "gauge",
                |b: &Bucket| u64::from(b.alarm()),
            ),
        ] {
            let _ = write!(out, "# HELP {name} {help}\n# TYPE {name} {kind}\n");
            for (class, bucket) in &buckets {
                let _ = writeln!(out, "{name}{{class=\"{class}\"}} {}", value(bucket));
            }
        }
        let gauge = |out: &mut String, name: &str, help: &str, v: u64| {
            let _ = write!(
                out,
                "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {v}\n"
            );
        };
        gauge(
            out,
            "joinsvc_ledger_generations",
            "Disks whose generation the ledger keeps (new disks are refused at 4096).",
            fill::GENERATIONS.load(Ordering::Relaxed),
        );
        gauge(
            out,
            "joinsvc_ledger_pending_joins",
            "Joins whose first boot runs.",
            fill::PENDING.load(Ordering::Relaxed),
        );
        gauge(
            out,
            "joinsvc_ledger_filter_entries",
            "Entries in the filter of served launches and joined disks (new ones are refused at \
             50000).",
            fill::FILTER_ENTRIES.load(Ordering::Relaxed),
        );
        let alarm = "joinsvc_ledger_alarm";
        let _ = write!(
            out,
            "# HELP {alarm} 1 when a part of the ledger nears its bound.\n# TYPE {alarm} gauge\n"
        );
        let _ = writeln!(
            out,
            "{alarm}{{part=\"generations\"}} {}",
            u64::from(fill::generations_alarm())
        );
        let _ = writeln!(
            out,
            "{alarm}{{part=\"filter\"}} {}",
            u64::from(fill::filter_alarm())
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counters_reasons_and_histogram() {
        let m = Metrics::default();
        m.join_tickets.fetch_add(2, Ordering::Relaxed);
        m.refused("attestation");
        m.refused("attestation");
        m.refused("invalid_request");
        m.observe_latency(Duration::from_millis(3));
        m.observe_latency(Duration::from_secs(7));
        m.admission(Status::Affirming);
        m.admission(Status::Affirming);
        m.admission(Status::Contraindicated);
        m.admitted("affirming", "node 1");
        m.admitted("affirming", "node 1");
        m.admitted("warning", "node \"2\"");
        let text = m.render();
        for line in [
            "joinsvc_tickets_issued_total{kind=\"join\"} 2",
            "joinsvc_tickets_issued_total{kind=\"rejoin\"} 0",
            "joinsvc_tickets_refused_total{reason=\"attestation\"} 2",
            "joinsvc_tickets_refused_total{reason=\"invalid_request\"} 1",
            "joinsvc_ticket_duration_seconds_bucket{le=\"0.0025\"} 0",
            "joinsvc_ticket_duration_seconds_bucket{le=\"0.005\"} 1",
            "joinsvc_ticket_duration_seconds_bucket{le=\"5\"} 1",
            "joinsvc_ticket_duration_seconds_bucket{le=\"+Inf\"} 2",
            "joinsvc_ticket_duration_seconds_count 2",
            "joinsvc_handshake_failures_total 0",
            "confboot_joinsvc_admissions_total{status=\"affirming\"} 2",
            "confboot_joinsvc_admissions_total{status=\"warning\"} 0",
            "confboot_joinsvc_admissions_total{status=\"contraindicated\"} 1",
            "confboot_joinsvc_admissions_total{status=\"none\"} 0",
            "joinsvc_set_admissions_total{status=\"warning\",set=\"node \\\"2\\\"\"} 1",
            "joinsvc_set_admissions_total{status=\"affirming\",set=\"node 1\"} 2",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "missing {line:?} in\n{text}"
            );
        }
    }

    #[test]
    fn renders_the_first_ticket_rate_and_the_ledgers_fill_with_their_alarms() {
        use crate::ledger::{FIRST_TICKET_ALARM, FIRST_TICKET_BURST};
        let m = Metrics::default();
        let class = SourceClass::Join("qemu-vtpm");
        for _ in 0..FIRST_TICKET_BURST - FIRST_TICKET_ALARM {
            m.first_tickets.check(class).unwrap();
            m.first_tickets.take(class);
        }
        m.first_tickets.check(SourceClass::Launch).unwrap();
        m.first_tickets.take(SourceClass::Launch);
        let text = m.render();
        let spent = FIRST_TICKET_BURST - FIRST_TICKET_ALARM;
        for line in [
            format!("joinsvc_first_tickets_total{{class=\"join/qemu-vtpm\"}} {spent}"),
            format!("joinsvc_first_tickets_left{{class=\"join/qemu-vtpm\"}} {FIRST_TICKET_ALARM}"),
            "joinsvc_first_tickets_alarm{class=\"join/qemu-vtpm\"} 1".into(),
            "joinsvc_first_tickets_alarm{class=\"launch/sev-snp\"} 0".into(),
            "joinsvc_first_tickets_rate_limited_total{class=\"join/qemu-vtpm\"} 0".into(),
            "# TYPE joinsvc_ledger_generations gauge".into(),
            "# TYPE joinsvc_ledger_filter_entries gauge".into(),
            "joinsvc_ledger_alarm{part=\"generations\"} ".into(),
            "joinsvc_ledger_alarm{part=\"filter\"} ".into(),
        ] {
            assert!(text.contains(&line), "{line} in\n{text}");
        }
    }
}
