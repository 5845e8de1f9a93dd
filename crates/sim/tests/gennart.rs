//! Gennart, Messerli, Hersch's results from the shipped scenario (Table 2), each within 10 %.
//!
//! Where the paper's numbers cannot all come from its stated parameters, the test says so and
//! checks the readings tried (`docs/results/simulate.md` explains them). The shipped scenario
//! reads §4's per-strand sequence literally: a point-to-point node reads a disk's next strand
//! once its processor has resampled the last (`[processor] p2p_read_ahead = false`), which gives
//! §5.2's "≈ 2 MB/s per node" with every other result of the list. The paper's processor
//! utilisations (0.4; 0.8 with two disks per node) come instead from nodes that read ahead
//! (3.2 MB/s per node): at 2 MB/s per node a 7.5 MB/s processor is 0.27 busy, so the two
//! figures cannot both hold. §5.1's 40 KB disk requests give 2 MB/s per node too, but break
//! the shared-bus read; one strand request in flight per node gives 1.7–1.8 and breaks the
//! point-to-point read and jitter.

use isochron_base::MbPerSec;
use isochron_sim::{
    Architecture, Component, Machine, Operation, Scenario, jitter, network_bound, sweep,
};

fn within(got: f64, want: f64, tol: f64) -> bool {
    (got / want - 1.0).abs() <= tol
}

#[test]
fn point_to_point_read_saturates_the_interface_links_at_30_mb_s() {
    let s = Scenario::default();
    let w = sweep(&s, Architecture::PointToPoint, Operation::Read, 1..=16);
    let p16 = w.at(16).unwrap();
    assert!(within(p16.throughput_mb_s, 30.0, 0.10), "{p16:?}");
    assert_eq!(p16.bottleneck, Component::InterfaceLink, "{p16:?}");
    assert_eq!(p16.analytic_bottleneck, Component::InterfaceLink);
    // "roughly four times each link throughput"; the interface processor "far from saturated".
    assert!(p16.utilization[&Component::InterfaceLink] > 0.9, "{p16:?}");
    assert!(p16.utilization[&Component::Interface] < 0.5, "{p16:?}");
    // Below saturation, the disks limit and throughput grows with the nodes.
    let p4 = w.at(4).unwrap();
    assert_eq!(p4.bottleneck, Component::Disk);
    assert!(p4.throughput_mb_s < w.at(8).unwrap().throughput_mb_s);
}

#[test]
fn shared_bus_read_saturates_the_bus_at_35_mb_s_beyond_12_nodes() {
    let s = Scenario::default();
    let w = sweep(&s, Architecture::SharedBus, Operation::Read, 1..=16);
    for n in 13..=16 {
        let p = w.at(n).unwrap();
        assert!(within(p.throughput_mb_s, 35.0, 0.10), "{p:?}");
        assert_eq!(p.bottleneck, Component::Bus, "{p:?}");
    }
    // Not saturated at 8 nodes: the disks limit there.
    assert_eq!(w.at(8).unwrap().bottleneck, Component::Disk);
    // The analytic bound is I/O.WriteToMemory, 38.9 MB/s.
    assert!(within(w.at(16).unwrap().analytic_mb_s, 38.9, 0.01));
}

#[test]
fn read_to_the_network_through_the_node_processor_is_bounded_at_15_73_mb_s() {
    let s = Scenario::default();
    let sim =
        sweep(&s, Architecture::SharedBus, Operation::Read, 16..=16).points[0].throughput_mb_s;
    let bound = network_bound(&s, MbPerSec(sim)).0;
    assert!(within(bound, 15.73, 0.10), "{bound}");
    // With the paper's own inputs (35 MB/s read) and ours for the copy (37.5) and DMA (100).
    assert!(within(network_bound(&s, MbPerSec(35.0)).0, 15.73, 0.10));
}

#[test]
fn shared_bus_resample_saturates_at_21_mb_s_by_8_nodes_under_a_24_mb_s_bound() {
    let s = Scenario::default();
    let w = sweep(&s, Architecture::SharedBus, Operation::Resample, 1..=16);
    for n in 8..=16 {
        let p = w.at(n).unwrap();
        assert!(within(p.throughput_mb_s, 21.0, 0.10), "{p:?}");
        assert_eq!(p.bottleneck, Component::Bus, "{p:?}");
        // The paper's estimate: 1/(1/40 + 1/100 + 1/(4·60) + 1/(4·100)) = 24 MB/s.
        assert_eq!(p.analytic_bottleneck, Component::Bus);
        assert!(within(p.bounds[&Component::Bus], 24.0, 0.10), "{p:?}");
        // Simulated below the estimate ("due to the contention").
        assert!(p.throughput_mb_s < p.bounds[&Component::Bus]);
    }
    assert_eq!(w.at(4).unwrap().bottleneck, Component::Disk);
}

#[test]
fn point_to_point_resample_is_disk_bound_at_2_mb_s_per_node_and_linear_to_16_nodes() {
    let s = Scenario::default();
    let w = sweep(&s, Architecture::PointToPoint, Operation::Resample, 1..=16);
    for p in &w.points {
        assert_eq!(p.bottleneck, Component::Disk, "{p:?}");
        // Per node, counting the striping remainder (the busiest node reads ⌈256/n⌉ strands).
        let per_node = p.throughput_mb_s * f64::from(256u32.div_ceil(p.nodes)) / 256.0;
        assert!(within(per_node, 2.0, 0.10), "{p:?}");
        // Linear: the analytic bound charges each disk its strand's serial chain (seek, disk,
        // SCSI, DMA, resampling: 88.3 ms per 168 960 B), and the simulation stays near it.
        assert!(within(p.throughput_mb_s, p.analytic_mb_s, 0.05), "{p:?}");
    }
    assert!(within(w.at(1).unwrap().throughput_mb_s, 1.92, 0.01));
    // §5.2's 16-disk estimate: "the disks will achieve a 32MByte/sec throughput".
    assert!(within(w.at(16).unwrap().throughput_mb_s, 32.0, 0.10));
    // The processors resample 2 MB/s at 7.5 MB/s: about 0.25 busy, not the paper's 0.4.
    let cpu = w.at(16).unwrap().utilization[&Component::Processor];
    assert!((0.23..0.27).contains(&cpu), "{cpu}");
}

#[test]
fn with_read_ahead_point_to_point_resample_is_3_2_mb_s_per_node_with_the_processors_at_0_4() {
    let s = Scenario::from_toml("[processor]\np2p_read_ahead = true\n").unwrap();
    let w = sweep(&s, Architecture::PointToPoint, Operation::Resample, 1..=16);
    let per_node = w.at(1).unwrap().throughput_mb_s;
    // One disk access of a strand: 10 ms mean seek + 168 960 B at 4 MB/s.
    let t = 0.010 + 0.042_24;
    for p in &w.points {
        assert_eq!(p.bottleneck, Component::Disk, "{p:?}");
        // Linear up to the striping remainder: the busiest node reads ⌈256/n⌉ strands.
        let linear = 256.0 * 0.168_96 / (f64::from(256u32.div_ceil(p.nodes)) * t);
        assert!(within(p.throughput_mb_s, linear, 0.10), "{p:?}");
        assert!(within(p.bounds[&Component::Disk], linear, 0.001), "{p:?}");
    }
    // The paper: "the processor utilization rate of 0.4".
    let cpu = w.at(16).unwrap().utilization[&Component::Processor];
    assert!(within(cpu, 0.4, 0.10), "{cpu}");
    // With one access per strand (Table 2's disk and the paper's "average seek-time for each
    // access") a node reads 168 960 B per 10 ms + 42.24 ms: 3.2 MB/s, not the paper's ≈ 2.
    assert!(within(per_node, 3.23, 0.05), "{per_node}");
}

#[test]
fn point_to_point_resample_is_2_mb_s_per_node_with_the_papers_40_kb_requests() {
    // §5.1's estimate: "the average delay for a 40KByte-disk-request is 20ms …, or a 2MBytes/s
    // throughput". Cutting each strand into 4 requests of 42 240 B gives it.
    let s = Scenario::from_toml(
        "[stream]\ndisk_requests_per_strand = 4\n[processor]\np2p_read_ahead = true\n",
    )
    .unwrap();
    let w = sweep(&s, Architecture::PointToPoint, Operation::Resample, 1..=16);
    for p in &w.points {
        assert_eq!(p.bottleneck, Component::Disk, "{p:?}");
        assert!(within(p.throughput_mb_s / f64::from(p.nodes), 2.0, 0.10), "{p:?}");
    }
    assert!(within(w.at(16).unwrap().throughput_mb_s, 32.0, 0.10));
    // …but then the shared-bus read cannot reach the paper's 35 MB/s: 16 disks give 32.9 at
    // most, and the bus is not the bottleneck.
    let b = sweep(&s, Architecture::SharedBus, Operation::Read, 16..=16);
    assert!(b.points[0].throughput_mb_s < 0.9 * 35.0, "{:?}", b.points[0]);
    assert_eq!(b.points[0].bottleneck, Component::Disk);
}

#[test]
fn strand_delay_deviation_is_about_10_ms_at_8_nodes_of_which_the_disk_7_07() {
    let s = Scenario::default();
    for arch in Architecture::ALL {
        let j = jitter(&s, arch, Operation::Read, 8, 0.9, 20_000);
        assert!(within(j.std_ms, 10.0, 0.10), "{j:?}");
        assert!(within(j.disk_std_ms, 7.07, 0.10), "{j:?}");
        assert!((j.disk_std_model_ms - 7.0711).abs() < 1e-3, "{j:?}");
        // The disk is the major part of the variance.
        assert!(j.disk_std_ms.powi(2) > 0.5 * j.std_ms.powi(2), "{j:?}");
        assert!(within(j.measured_utilization, 0.9, 0.05), "{j:?}");
    }
}

#[test]
fn two_disks_per_node_double_the_input_and_load_the_processors_to_0_8_with_read_ahead() {
    // §5.2: "two disks per disk-node would increase the processor utilization to 0.8 and double
    // the input throughput". That holds for nodes that read ahead.
    let one = Scenario::from_toml("[processor]\np2p_read_ahead = true\n").unwrap();
    let two =
        Scenario::from_toml("[processor]\np2p_read_ahead = true\n[disk]\nper_node = 2\n").unwrap();
    let a = sweep(&one, Architecture::PointToPoint, Operation::Resample, 8..=8).points[0].clone();
    let b = sweep(&two, Architecture::PointToPoint, Operation::Resample, 8..=8).points[0].clone();
    assert!(within(b.throughput_mb_s / a.throughput_mb_s, 2.0, 0.10), "{a:?} {b:?}");
    assert!(within(b.utilization[&Component::Processor], 0.8, 0.10), "{b:?}");
    // The shipped scenario's nodes (no read-ahead) gain ×1.69: the two disks' serial chains
    // share the node's SCSI bus, local bus and processor, then 0.42 busy.
    let one = Scenario::default();
    let two = Scenario::from_toml("[disk]\nper_node = 2\n").unwrap();
    let a = sweep(&one, Architecture::PointToPoint, Operation::Resample, 8..=8).points[0].clone();
    let b = sweep(&two, Architecture::PointToPoint, Operation::Resample, 8..=8).points[0].clone();
    assert!((1.6..1.8).contains(&(b.throughput_mb_s / a.throughput_mb_s)), "{a:?} {b:?}");
    assert!((0.4..0.45).contains(&b.utilization[&Component::Processor]), "{b:?}");
}

#[test]
fn one_strand_request_in_flight_per_node_does_not_give_the_papers_point_to_point_results() {
    // The request/response reading of §4: the interface processor sends a node its next strand
    // request when the previous strand has come back. Each node then works on one strand at a
    // time, and its route's service times add up. Recorded here because it gives 1.79 MB/s per
    // node at most, not 2, and breaks three results that hold without a window
    // (docs/results/simulate.md).
    let base = Scenario::default();
    let s = Scenario::from_toml(
        "[interface]\nstrands_in_flight_per_node = 1\n[processor]\np2p_read_ahead = true\n",
    )
    .unwrap();
    let m = Machine::new(&s, Architecture::PointToPoint, 1);
    let chain: f64 = m
        .strand_route(&s, Operation::Resample, 0)
        .steps
        .iter()
        .map(|st| st.mean_secs(s.seek_mean()))
        .sum();
    // 10 ms seek + 42.24 ms disk + 9.18 ms SCSI + 4.34 ms DMA + 22.5 ms processor + 5.6 ms
    // compressor + small steps: 94.2 ms per 168 960 B, 1.79 MB/s.
    let serial = s.strand_bytes() as f64 / chain / 1e6;
    assert!(within(serial, 1.79, 0.01), "{serial}");
    let w = sweep(&s, Architecture::PointToPoint, Operation::Resample, 1..=16);
    for p in &w.points {
        // Linear up to the striping remainder: the busiest node returns ⌈256/n⌉ strands.
        let linear = 256.0 * serial / f64::from(256u32.div_ceil(p.nodes));
        assert!(within(p.throughput_mb_s, linear, 0.05), "{p:?}");
        // Below the paper's 2 MB/s per node by more than 10 %.
        assert!(p.throughput_mb_s / f64::from(p.nodes) < 1.8, "{p:?}");
    }
    // The processors at 0.25, not the paper's 0.4.
    let cpu = w.at(16).unwrap().utilization[&Component::Processor];
    assert!(cpu < 0.3, "{cpu}");
    // Read: 16 nodes no longer saturate the interface links (24 MB/s, not 30).
    let r = sweep(&s, Architecture::PointToPoint, Operation::Read, 16..=16).points[0].clone();
    assert!(r.throughput_mb_s < 0.9 * 30.0, "{r:?}");
    assert!(r.utilization[&Component::InterfaceLink] < 0.8, "{r:?}");
    // Two disks per node: no more input (the node still works on one strand at a time).
    let two = Scenario::from_toml(
        "[interface]\nstrands_in_flight_per_node = 1\n[processor]\np2p_read_ahead = true\n\
             [disk]\nper_node = 2\n",
    )
    .unwrap();
    let a = w.at(8).unwrap().throughput_mb_s;
    let b = sweep(&two, Architecture::PointToPoint, Operation::Resample, 8..=8).points[0]
        .throughput_mb_s;
    assert!(within(b / a, 1.0, 0.05), "{a} {b}");
    // Jitter at 0.9: each node's requests fall due every 58 ms (7.26 ms over 8 nodes), but a
    // node returns one strand per 90 ms (its disk busy 0.58), so the delays grow without bound.
    let j = jitter(&s, Architecture::PointToPoint, Operation::Read, 8, 0.9, 4000);
    assert!(j.measured_utilization < 0.65 && j.std_ms > 100.0, "{j:?}");
    // The shared bus has no interface processor: unchanged.
    for op in Operation::ALL {
        assert_eq!(
            sweep(&s, Architecture::SharedBus, op, 7..=9),
            sweep(&base, Architecture::SharedBus, op, 7..=9)
        );
    }
}

#[test]
fn read_ahead_changes_point_to_point_resample_only() {
    // The key only decides whether a point-to-point node reads a disk's next strand while its
    // processor resamples: every other result is the same, byte for byte (read does not wait
    // for a processor, and the shared bus always reads ahead).
    let base = Scenario::default();
    let s = Scenario::from_toml("[processor]\np2p_read_ahead = true\n").unwrap();
    assert_ne!(
        sweep(&s, Architecture::PointToPoint, Operation::Resample, 4..=4),
        sweep(&base, Architecture::PointToPoint, Operation::Resample, 4..=4)
    );
    assert_eq!(
        sweep(&s, Architecture::PointToPoint, Operation::Read, 1..=16),
        sweep(&base, Architecture::PointToPoint, Operation::Read, 1..=16)
    );
    for op in Operation::ALL {
        assert_eq!(
            sweep(&s, Architecture::SharedBus, op, 7..=9),
            sweep(&base, Architecture::SharedBus, op, 7..=9)
        );
    }
    for arch in Architecture::ALL {
        assert_eq!(
            jitter(&s, arch, Operation::Read, 8, 0.9, 4000),
            jitter(&base, arch, Operation::Read, 8, 0.9, 4000)
        );
    }
}
