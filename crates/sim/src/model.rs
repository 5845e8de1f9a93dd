//! The architectures and operations of Gennart et al. as resources and routes for the engine.
//!
//! Why: the paper compares two multiprocessor-multidisk architectures (§3.3, §3.4) on two
//! operations (§4): the point-to-point architecture, where intelligent disk nodes (processor,
//! memory on a local bus, a compression circuit, a SCSI bus with disks) send their strands over
//! their communication link and a crossbar to the four links of a server interface processor;
//! and the shared-bus architecture, where the same nodes share one backplane bus and memory.
//! The operations are the parallel stream read (strands of one frame, striped round-robin over
//! the disk nodes) and read + resample + compress. This module builds, for a scenario, an
//! architecture and a node count, the resources ([`Machine`]) and the route of each strand
//! through them (a list of elementary operations, [`Step`]s), and the analytic bound the paper
//! compares its simulations with (§5.1: "the time spent by each component to produce one byte";
//! for a single shared bus, `1 / Σ 1/throughput` over the bus transfers a byte needs).
//!
//! The route of a strand of `S` bytes on node `i` (`f` the resampling factor, `c` the
//! compression factor; `bus` is node `i`'s local bus on point-to-point, the shared bus otherwise):
//!
//! ```text
//! strand request      p2p: interface link + link i (control message)   shared: bus (raw)
//! SCSI command        cpu i + bus (raw), then SCSI bus i
//! disk access         disk: k seeks from Gennart's density + S / disk rate
//! SCSI transfer       SCSI bus i: S / 18.4 MB/s
//! DMA to memory       bus: I/O.WriteToMemory of S
//! read, p2p:          bus: device read of S (link DMA); link i + an interface link: S / 8 MB/s;
//!                     interface processor: S into its memory
//! resample:           cpu: S / 7.5 MB/s in all, of which cpu + bus: Processor.ReadFromMemory
//!                     of S first and Processor.WriteToMemory of S/f last; bus: device read of S/f;
//!                     compressor: S/f / 7.5 MB/s; bus: I/O.WriteToMemory of S/(f·c);
//!   and on p2p:       bus: device read of S/(f·c); link i + an interface link; interface
//! ```
//!
//! How strands are requested (§4): on point-to-point the server interface processor divides the
//! stream request into strand requests and sends them to the nodes; it may keep at most a
//! window of them outstanding per node (`[interface] strands_in_flight_per_node`, 0 by default:
//! no limit, as §5.1's experiment requests every strand at the start). On the shared bus a
//! broadcast request makes every node generate its own strand requests ("all disk nodes
//! generate in parallel strand access requests"), with no window.
//!
//! How a point-to-point node works through read + resample (§4: "reading and resampling a
//! strand consists (a) of … reading the strand …; (b) resampling the strand …; (c) compressing
//! the resampled strand"; "each disk-node accesses its strands from its disk, resamples them
//! independently and transfers the resampled strands"): by default a node does not read ahead
//! of its processor (`[processor] p2p_read_ahead = false`): the processor issues a disk's next
//! strand read once it has resampled that disk's last strand, so per disk the steps from the
//! SCSI command to the resampled strand's write run one strand at a time ([`Route::serial`]);
//! compression and the transfer to the interface overlap the next read (1.84–1.92 MB/s per
//! disk, §5.2's "≈ 2"; docs/results/simulate.md). With read-ahead a disk reads on while the
//! processor resamples (as §5.1's "strands stored on the same disk-node are processed in
//! pipeline": 3.2 MB/s per disk, the processor 0.4 busy). The read operation has no processor
//! work between a strand's DMA into memory and its link DMA, so a node always reads ahead for
//! it.
//!
//! The read operation on the shared bus ends with the strand in shared memory, as the paper's
//! does ("data has only reached the architecture's shared memory"); [`network_bound`] is the
//! paper's estimate of what sending it on to the network would leave.
//!
//! Not here: running the engine and measuring (`experiment`).

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use isochron_base::MbPerSec;
use serde::Serialize;

use crate::engine::{Gate, JobId, ResourceId, ResourceSpec, Step, transfer_time};
use crate::scenario::{Scenario, Transfer};

/// The two architectures of the paper.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum Architecture {
    /// Disk nodes linked to a server interface processor (§3.3, Fig. 2): `p2p`.
    #[serde(rename = "p2p")]
    PointToPoint,
    /// Disk nodes sharing one backplane bus and memory (§3.4, Fig. 3): `shared-bus`.
    #[serde(rename = "shared-bus")]
    SharedBus,
}

impl Architecture {
    /// Both, in the paper's order.
    pub const ALL: [Self; 2] = [Self::PointToPoint, Self::SharedBus];

    /// The name on the command line and in reports.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::PointToPoint => "p2p",
            Self::SharedBus => "shared-bus",
        }
    }
}

/// The two operations of the paper (§4).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Operation {
    /// Parallel stream read (§5.1): `read`.
    Read,
    /// Read, resample and compress (§5.2): `resample`.
    Resample,
}

impl Operation {
    /// Both, in the paper's order.
    pub const ALL: [Self; 2] = [Self::Read, Self::Resample];

    /// The name on the command line and in reports.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Read => "read",
            Self::Resample => "resample",
        }
    }
}

/// A name that is not an architecture or an operation.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown {what} {name:?}: expected {expected}")]
pub struct ParseError {
    /// What was parsed.
    pub what: &'static str,
    /// The name given.
    pub name: String,
    /// The names accepted.
    pub expected: &'static str,
}

impl FromStr for Architecture {
    type Err = ParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL.into_iter().find(|a| a.as_str() == s).ok_or_else(|| ParseError {
            what: "architecture",
            name: s.into(),
            expected: "p2p or shared-bus",
        })
    }
}

impl FromStr for Operation {
    type Err = ParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL.into_iter().find(|a| a.as_str() == s).ok_or_else(|| ParseError {
            what: "operation",
            name: s.into(),
            expected: "read or resample",
        })
    }
}

impl fmt::Display for Architecture {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Display for Operation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A class of component, as the paper plots them (Fig. 4 and 6: D, S, B, P, L, I lines).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Component {
    /// The disks (D).
    Disk,
    /// The SCSI buses (S).
    Scsi,
    /// The backplane buses: each node's on point-to-point, the shared one otherwise (B).
    Bus,
    /// The disk-node processors (P).
    Processor,
    /// The compression circuits.
    Compressor,
    /// The disk nodes' communication links (L).
    Link,
    /// The server interface processor's links (L, the shared ones).
    InterfaceLink,
    /// The server interface processor's memory (I).
    Interface,
}

impl Component {
    /// The name in reports and JSON keys.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Disk => "disk",
            Self::Scsi => "scsi",
            Self::Bus => "bus",
            Self::Processor => "processor",
            Self::Compressor => "compressor",
            Self::Link => "link",
            Self::InterfaceLink => "interface_link",
            Self::Interface => "interface",
        }
    }
}

impl fmt::Display for Component {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The resources of one architecture with a number of disk nodes.
#[derive(Clone, Debug)]
pub struct Machine {
    /// The architecture.
    pub arch: Architecture,
    /// Disk nodes.
    pub nodes: u32,
    /// The resources for the engine, by [`ResourceId`].
    pub specs: Vec<ResourceSpec>,
    /// The class of each resource, by [`ResourceId`].
    pub classes: Vec<Component>,
    disks: Vec<Vec<ResourceId>>,
    scsi: Vec<ResourceId>,
    bus: Vec<ResourceId>,
    cpu: Vec<ResourceId>,
    compressor: Vec<ResourceId>,
    link: Vec<ResourceId>,
    interface_links: Option<ResourceId>,
    interface: Option<ResourceId>,
}

/// The steps of one strand, which of them is the disk access, and what they wait for.
#[derive(Clone, Debug)]
pub struct Route {
    /// The elementary operations, in order.
    pub steps: Vec<Step>,
    /// Index of the disk access in `steps`.
    pub disk_step: usize,
    /// Bytes of stream the strand carries (before any processing).
    pub bytes: u64,
    /// Steps that wait for earlier strands; a gate's job is the strand index (strands are
    /// added to the engine in order).
    pub gates: Vec<Gate>,
    /// Steps its disk works through one strand at a time (a point-to-point node without
    /// read-ahead): the disk's next strand is read only after these end, so the analytic
    /// bound charges them all to the disk.
    pub serial: Option<std::ops::Range<usize>>,
}

impl Machine {
    /// The resources of `arch` with `nodes` disk nodes (at least 1).
    #[must_use]
    pub fn new(scenario: &Scenario, arch: Architecture, nodes: u32) -> Self {
        let nodes = nodes.max(1);
        let mut m = Self {
            arch,
            nodes,
            specs: Vec::new(),
            classes: Vec::new(),
            disks: Vec::new(),
            scsi: Vec::new(),
            bus: Vec::new(),
            cpu: Vec::new(),
            compressor: Vec::new(),
            link: Vec::new(),
            interface_links: None,
            interface: None,
        };
        let seek = scenario.seek_mean();
        let shared_bus = match arch {
            Architecture::SharedBus => Some(m.add(Component::Bus, "bus".into(), 1, None)),
            Architecture::PointToPoint => None,
        };
        for n in 0..nodes {
            let disks = (0..scenario.disk.per_node)
                .map(|d| m.add(Component::Disk, format!("disk {n}.{d}"), 1, Some(seek)))
                .collect();
            m.disks.push(disks);
            let scsi = m.add(Component::Scsi, format!("scsi {n}"), 1, None);
            m.scsi.push(scsi);
            let bus = match shared_bus {
                Some(b) => b,
                None => m.add(Component::Bus, format!("bus {n}"), 1, None),
            };
            m.bus.push(bus);
            let cpu = m.add(Component::Processor, format!("processor {n}"), 1, None);
            m.cpu.push(cpu);
            let comp = m.add(Component::Compressor, format!("compressor {n}"), 1, None);
            m.compressor.push(comp);
            if arch == Architecture::PointToPoint {
                let link = m.add(Component::Link, format!("link {n}"), 1, None);
                m.link.push(link);
            }
        }
        if arch == Architecture::PointToPoint {
            let k = scenario.link.interface_links as usize;
            m.interface_links =
                Some(m.add(Component::InterfaceLink, "interface links".into(), k, None));
            m.interface = Some(m.add(Component::Interface, "interface".into(), 1, None));
        }
        m
    }

    fn add(
        &mut self,
        class: Component,
        name: String,
        servers: usize,
        seek_mean: Option<Duration>,
    ) -> ResourceId {
        self.specs.push(ResourceSpec { name, servers, seek_mean });
        self.classes.push(class);
        ResourceId(self.specs.len() - 1)
    }

    /// The component classes this architecture has, in report order.
    #[must_use]
    pub fn component_classes(&self) -> Vec<Component> {
        let mut v: Vec<Component> = self.classes.clone();
        v.sort_unstable();
        v.dedup();
        v
    }

    /// The route of strand `index` (striped round-robin: node `index mod nodes`, then the
    /// node's disks in turn).
    #[must_use]
    pub fn strand_route(&self, s: &Scenario, op: Operation, index: u32) -> Route {
        let n = (index % self.nodes) as usize;
        let per_node = s.disk.per_node.max(1);
        let disk = self.disks[n][((index / self.nodes) % per_node) as usize];
        let bytes = s.strand_bytes();
        let size = bytes as f64;
        let msg = f64::from(s.stream.control_message_bytes);
        let (bus, cpu, scsi) = (self.bus[n], self.cpu[n], self.scsi[n]);
        let mut r = RouteBuilder { s, steps: Vec::new() };

        // Strand request from the requester to the node.
        match (self.interface_links, self.arch) {
            (Some(il), Architecture::PointToPoint) => {
                r.rate(&[self.link[n], il], msg, s.link.rate_mb_s, 0);
            }
            _ => r.bus(&[bus], msg, &[Transfer::Raw]),
        }
        // SCSI command: the processor writes it to the controller, which sends it to the disk.
        let command_step = r.steps.len();
        r.bus(&[cpu, bus], msg, &[Transfer::Raw]);
        r.rate(&[scsi], msg, s.scsi.rate_mb_s, 0);
        // The disk access, the SCSI transfer, the DMA into memory.
        let disk_step = r.steps.len();
        r.rate(&[disk], size, s.disk.rate_mb_s, s.stream.disk_requests_per_strand);
        r.rate(&[scsi], size, s.scsi.rate_mb_s, 0);
        r.bus(&[bus], size, &s.cache.io_write);

        let mut to_interface = size;
        let mut resampled_end = None;
        if op == Operation::Resample {
            let resampled = size / s.stream.resample_factor;
            let compressed = resampled / s.stream.compression_factor;
            // Table 2's resampling rate is the whole operation's, measured on a workstation
            // (§3.2: a strand's resampling code timed end to end), so its cache misses (§4:
            // "resampling the strand (CPU, 2 bus transfers)") hold the bus within that time
            // rather than add to it.
            let fill = r.bus_time(size, &s.cache.processor_read);
            let spill = r.bus_time(resampled, &s.cache.processor_write);
            let whole = rate_time(size, s.processor.resample_mb_s);
            r.fixed(&[cpu, bus], fill);
            r.fixed(&[cpu], whole.saturating_sub(fill + spill));
            r.fixed(&[cpu, bus], spill);
            resampled_end = Some(r.steps.len());
            r.bus(&[bus], resampled, &s.cache.device_read);
            r.rate(&[self.compressor[n]], resampled, s.compressor.input_mb_s, 0);
            r.bus(&[bus], compressed, &s.cache.io_write);
            to_interface = compressed;
        }
        if let (Some(il), Some(iface)) = (self.interface_links, self.interface) {
            r.bus(&[bus], to_interface, &s.cache.device_read);
            r.rate(&[self.link[n], il], to_interface, s.link.rate_mb_s, 0);
            r.rate(&[iface], to_interface, s.interface.memory_write_mb_s, 0);
        }
        let mut gates = Vec::new();
        let mut serial = None;
        if self.arch == Architecture::PointToPoint {
            // A window of `w` strand requests per node
            // ([`InterfaceParams::strands_in_flight_per_node`](crate::scenario::InterfaceParams)):
            // a strand is requested when the same node's strand `w` places earlier is back.
            let w = s.interface.strands_in_flight_per_node;
            if let Some(prev) = index.checked_sub(w.saturating_mul(self.nodes)).filter(|_| w > 0) {
                let on = JobId(prev as usize);
                gates.push(Gate { step: 0, on, steps_done: r.steps.len() });
            }
            // No read-ahead: the SCSI command for this strand waits until the processor has
            // resampled the same disk's previous strand.
            if let (Some(end), false) = (resampled_end, s.processor.p2p_read_ahead) {
                serial = Some(command_step..end);
                if let Some(prev) = index.checked_sub(self.nodes * per_node) {
                    let on = JobId(prev as usize);
                    gates.push(Gate { step: command_step, on, steps_done: end });
                }
            }
        }
        Route { steps: r.steps, disk_step, bytes, gates, serial }
    }

    /// The analytic bound of a set of routes, per component class: the stream throughput at
    /// which the busiest resource of the class would be busy all the time, i.e. total bytes over
    /// the most work any one server of the class must do (seeks at their mean). For one shared
    /// bus this is the paper's `1 / Σ 1/throughput` over the bus transfers each byte needs.
    #[must_use]
    pub fn analytic_bounds(&self, s: &Scenario, routes: &[Route]) -> BTreeMap<Component, MbPerSec> {
        let mut work = vec![0.0f64; self.specs.len()];
        let seek = s.seek_mean();
        for route in routes {
            for step in &route.steps {
                for r in &step.resources {
                    work[r.0] += step.mean_secs(seek);
                }
            }
            // A disk that waits for its strand's processing before the next read is occupied,
            // in effect, for the whole serial chain.
            if let (Some(chain), Some(disk)) =
                (&route.serial, route.steps[route.disk_step].resources.first())
            {
                let rest: f64 = chain
                    .clone()
                    .filter(|i| *i != route.disk_step)
                    .map(|i| route.steps[i].mean_secs(seek))
                    .sum();
                work[disk.0] += rest;
            }
        }
        let bytes: f64 = routes.iter().map(|r| r.bytes as f64).sum();
        let mut out: BTreeMap<Component, MbPerSec> = BTreeMap::new();
        for (i, w) in work.iter().enumerate() {
            let per_server = w / self.specs[i].servers.max(1) as f64;
            if per_server <= 0.0 {
                continue;
            }
            let bound = MbPerSec::from_bytes_per_sec(bytes / per_server);
            let e = out.entry(self.classes[i]).or_insert(bound);
            if bound.0 < e.0 {
                *e = bound;
            }
        }
        out
    }
}

struct RouteBuilder<'a> {
    s: &'a Scenario,
    steps: Vec<Step>,
}

impl RouteBuilder<'_> {
    fn rate(&mut self, res: &[ResourceId], bytes: f64, mb_s: f64, seeks: u32) {
        let fixed = rate_time(bytes, mb_s);
        self.steps.push(Step { resources: res.to_vec(), fixed, seeks });
    }

    fn bus(&mut self, res: &[ResourceId], bytes: f64, transfers: &[Transfer]) {
        let fixed = self.bus_time(bytes, transfers);
        self.fixed(res, fixed);
    }

    /// The bus time of `transfers` of `bytes`.
    fn bus_time(&self, bytes: f64, transfers: &[Transfer]) -> Duration {
        Duration::from_nanos(
            (bytes * self.s.bus_secs_per_byte(transfers) * 1e9).round().max(0.0) as u64
        )
    }

    fn fixed(&mut self, res: &[ResourceId], fixed: Duration) {
        self.steps.push(Step { resources: res.to_vec(), fixed, seeks: 0 });
    }
}

/// The time to move `bytes` at `mb_s` MB/s.
fn rate_time(bytes: f64, mb_s: f64) -> Duration {
    transfer_time(bytes, MbPerSec(mb_s).bytes_per_sec())
}

/// The paper's estimate of the shared-bus read when the data must go on to the network through
/// the disk-node processor (§5.1): `1 / (1/disk_to_memory + 1/memcpy + 1/device_read)`, with the
/// memory-to-memory round trip through the processor (protocol headers) and the DMA from memory
/// to the network adapter charged on the bus. The paper uses its simulated 35 MB/s, a 40 MB/s
/// copy and a 100 MB/s transfer: 15.73 MB/s.
#[must_use]
pub fn network_bound(s: &Scenario, disk_to_memory: MbPerSec) -> MbPerSec {
    let secs = disk_to_memory.secs_for(1.0)
        + s.bus_secs_per_byte(&s.cache.memcpy)
        + s.bus_secs_per_byte(&s.cache.device_read);
    MbPerSec::from_bytes_per_sec(1.0 / secs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bound(arch: Architecture, op: Operation, nodes: u32) -> (Component, f64) {
        let s = Scenario::default();
        let m = Machine::new(&s, arch, nodes);
        let routes: Vec<Route> = (0..s.strands()).map(|i| m.strand_route(&s, op, i)).collect();
        let b = m.analytic_bounds(&s, &routes);
        let (c, v) = b.iter().min_by(|a, b| a.1.0.total_cmp(&b.1.0)).unwrap();
        (*c, v.0)
    }

    #[test]
    fn names_parse_back() {
        for a in Architecture::ALL {
            assert_eq!(a.as_str().parse::<Architecture>().unwrap(), a);
        }
        for o in Operation::ALL {
            assert_eq!(o.as_str().parse::<Operation>().unwrap(), o);
        }
        let e = "ring".parse::<Architecture>().unwrap_err().to_string();
        assert!(e.contains("ring") && e.contains("p2p"), "{e}");
    }

    #[test]
    fn machines_have_the_papers_components() {
        let s = Scenario::default();
        let p = Machine::new(&s, Architecture::PointToPoint, 4);
        // Per node: disk, SCSI, bus, processor, compressor, link; plus the links pool and the
        // interface processor.
        assert_eq!(p.specs.len(), 4 * 6 + 2);
        assert_eq!(p.specs[p.interface_links.unwrap().0].servers, 4);
        let b = Machine::new(&s, Architecture::SharedBus, 4);
        assert_eq!(b.specs.len(), 1 + 4 * 4);
        assert!(!b.component_classes().contains(&Component::Link));
        // Round-robin striping.
        let r5 = b.strand_route(&s, Operation::Read, 5);
        assert_eq!(r5.steps[r5.disk_step].resources, vec![b.disks[1][0]]);
    }

    #[test]
    fn a_request_window_chains_a_nodes_strands_on_point_to_point_only() {
        let mut s = Scenario::default();
        let p = Machine::new(&s, Architecture::PointToPoint, 4);
        assert!(p.strand_route(&s, Operation::Read, 9).gates.is_empty(), "no window by default");
        s.interface.strands_in_flight_per_node = 2;
        // Strand 9 is node 1's third: its request waits for node 1's first, strand 1, to end.
        let r9 = p.strand_route(&s, Operation::Read, 9);
        assert_eq!(r9.gates, vec![Gate { step: 0, on: JobId(1), steps_done: r9.steps.len() }]);
        assert!(p.strand_route(&s, Operation::Read, 7).gates.is_empty());
        let b = Machine::new(&s, Architecture::SharedBus, 4);
        assert!(b.strand_route(&s, Operation::Read, 9).gates.is_empty());
    }

    #[test]
    fn without_read_ahead_a_p2p_disk_reads_its_next_strand_once_the_last_is_resampled() {
        let mut s = Scenario::default();
        s.processor.p2p_read_ahead = true;
        let p = Machine::new(&s, Architecture::PointToPoint, 4);
        let r9 = p.strand_route(&s, Operation::Resample, 9);
        assert!(r9.gates.is_empty() && r9.serial.is_none(), "with read-ahead");
        s.disk.per_node = 2;
        s.processor.p2p_read_ahead = false;
        let p = Machine::new(&s, Architecture::PointToPoint, 4);
        // Strand 9: node 1, disk 0 (its second round); the same disk's previous strand is 1.
        let r9 = p.strand_route(&s, Operation::Resample, 9);
        let chain = r9.serial.clone().expect("serial without read-ahead");
        assert!(chain.contains(&r9.disk_step));
        assert_eq!(r9.gates, vec![Gate { step: chain.start, on: JobId(1), steps_done: chain.end }]);
        // The gated step is the SCSI command, before the disk access; the chain ends with the
        // processor's write of the resampled strand (then compression and the link overlap).
        assert_eq!(chain.start + 2, r9.disk_step);
        assert_eq!(r9.steps[chain.end - 1].resources, vec![p.cpu[1], p.bus[1]]);
        // A disk's first strand waits for nothing; reads do not wait; nor does the shared bus.
        assert!(p.strand_route(&s, Operation::Resample, 7).gates.is_empty());
        assert!(p.strand_route(&s, Operation::Read, 9).serial.is_none());
        let b = Machine::new(&s, Architecture::SharedBus, 4);
        assert!(b.strand_route(&s, Operation::Resample, 9).gates.is_empty());
    }

    #[test]
    fn analytic_bounds_are_the_papers_sums() {
        // Shared bus, read: the bus at I/O.WriteToMemory (plus control messages) once the
        // disks outrun it.
        let (c, v) = bound(Architecture::SharedBus, Operation::Read, 16);
        assert_eq!(c, Component::Bus);
        assert!((v - 38.9).abs() < 0.2, "{v}");
        // Shared bus, resample: 1/(1/38.9 + 1/100 + 1/(4·60) + 1/(4·100) + …) ≈ 23.5 (the
        // paper, with 40 for 38.9 and the compressed write-back neglected: 24).
        let (c, v) = bound(Architecture::SharedBus, Operation::Resample, 16);
        assert_eq!(c, Component::Bus);
        assert!((v - 23.5).abs() < 0.3, "{v}");
        // Point-to-point read: four 8 MB/s interface links.
        let (c, v) = bound(Architecture::PointToPoint, Operation::Read, 16);
        assert_eq!(c, Component::InterfaceLink);
        assert!((v - 32.0).abs() < 0.1, "{v}");
        // Point-to-point resample: each disk busy, in effect, for a strand's serial chain, from
        // its SCSI command to the processor's write of the resampled strand: 10 ms seek +
        // 42.24 ms disk + 9.18 ms SCSI + 4.34 ms DMA + 22.53 ms resampling + small steps.
        let s = Scenario::default();
        let m = Machine::new(&s, Architecture::PointToPoint, 16);
        let r = m.strand_route(&s, Operation::Resample, 0);
        let chain: f64 =
            r.steps[r.serial.clone().unwrap()].iter().map(|st| st.mean_secs(s.seek_mean())).sum();
        assert!((0.0882..0.0884).contains(&chain), "{chain}");
        let (c, v) = bound(Architecture::PointToPoint, Operation::Resample, 16);
        assert_eq!(c, Component::Disk);
        assert!((v - 16.0 * 0.168_96 / chain).abs() < 0.01, "{v} {chain}");
        // With read-ahead: the disks alone, 168 960 B per 10 ms + 42.24 ms.
        let mut s = Scenario::default();
        s.processor.p2p_read_ahead = true;
        let m = Machine::new(&s, Architecture::PointToPoint, 16);
        let routes: Vec<Route> =
            (0..s.strands()).map(|i| m.strand_route(&s, Operation::Resample, i)).collect();
        let v = m.analytic_bounds(&s, &routes)[&Component::Disk].0;
        assert!((v - 16.0 * 0.168_96 / 0.052_24).abs() < 0.01, "{v}");
    }

    #[test]
    fn network_bound_is_the_papers_formula() {
        let s = Scenario::default();
        // With the paper's 40 MB/s copy: 1/(1/35 + 1/40 + 1/100) = 15.73.
        let mut paper = s.clone();
        paper.cache.memcpy = vec![Transfer::Raw];
        paper.bus.raw_mb_s = 40.0;
        assert!((network_bound(&paper, MbPerSec(35.0)).0 - 15.73).abs() < 0.01);
        // With Table 2's copy (a read at 100 plus a write at 60: 37.5 MB/s).
        let v = network_bound(&s, MbPerSec(35.0)).0;
        assert!((v - 1.0 / (1.0 / 35.0 + 1.0 / 37.5 + 1.0 / 100.0)).abs() < 1e-9, "{v}");
    }
}
