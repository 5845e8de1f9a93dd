//! Scenarios: every parameter of a simulation, with Gennart et al.'s Table 2 as the default.
//!
//! Why: the paper's method (Gennart, Messerli, Hersch §3.1) is to *measure* elementary
//! operations on real machines and feed the measurements to a simulator. The measurements are
//! therefore the input, and a user must be able to replace any of them with their own hardware's
//! numbers without recompiling. A scenario is a TOML document; [`Scenario::default`] is the
//! paper's (Table 2 plus the stream of §5), embedded here and written out as
//! `config/sim-gennart.toml` (a test checks the two are equal). A scenario file only needs the
//! keys it changes; an unknown key is an error that names it.
//!
//! Units are in the key names (`seek_mean_ms`, `rate_mb_s`); throughputs are decimal megabytes
//! per second ([`MbPerSec`]), as in the paper ("40KByte … 10ms … at 4MBytes/s").
//!
//! Not here: reading the file (the binary does; [`Scenario::from_toml`] takes text).

use std::time::Duration;

use isochron_base::MbPerSec;
use serde::{Deserialize, Serialize};

/// Every parameter of a simulation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Scenario {
    /// Seed of every random draw (the disks' seek times). Same scenario and seed, same report.
    pub seed: u64,
    /// The stream and how it is cut into strands (§4, §5.1, §5.2).
    pub stream: StreamParams,
    /// The magnetic disks (§3.2 "Disk access", "Disk modeling"; Table 2 `Disk.Read`).
    pub disk: DiskParams,
    /// Each node's SCSI-2 bus (§3.2 "SCSI-bus"; Table 2 `ScsiBus.Transfer`).
    pub scsi: ScsiParams,
    /// The backplane bus: the cost of one bus transfer of each kind (§3.5, Table 2).
    pub bus: BusParams,
    /// How many bus transfers of which kind each elementary operation costs (§3.5: cache effects).
    pub cache: CacheParams,
    /// The disk-node processors (§3.2 "Stream resampling"; Table 2 `Cpu.Resample`).
    pub processor: ProcessorParams,
    /// The compression circuits (§3.2 "MPEG compression"; Table 2 `MPEGCompressor.Recompress`).
    pub compressor: CompressorParams,
    /// The communication links of the point-to-point architecture (§3.3; Table 2 `Link.Transfer`).
    pub link: LinkParams,
    /// The server interface processor of the point-to-point architecture (§3.3).
    pub interface: InterfaceParams,
}

/// The stream read in the experiments and its strands.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StreamParams {
    /// Frame width, pixels (352).
    pub frame_width_px: u32,
    /// Frame height, pixels (240).
    pub frame_height_px: u32,
    /// Bytes per pixel (2).
    pub bytes_per_pixel: u32,
    /// Frames in the stream (256).
    pub frames: u32,
    /// Frames per strand (1): a strand is the unit striped round-robin over the disk nodes.
    pub frames_per_strand: u32,
    /// Disk requests a strand is cut into, each paying a seek (1: the whole strand in one access,
    /// as the paper's simulations count "an average seek-time for each access"; its §5.1
    /// estimate uses 40 KB requests, about 4 per strand: see `docs/results/simulate.md`).
    pub disk_requests_per_strand: u32,
    /// Factor by which resampling divides a frame's size (4: half in X and in Y).
    pub resample_factor: f64,
    /// Factor by which the compression circuit divides the resampled data (15).
    pub compression_factor: f64,
    /// Size of a control message (strand request, SCSI command), bytes. Not in the paper, which
    /// only says such "small packets" travel on the bus and links; 64 is our choice.
    pub control_message_bytes: u32,
}

/// The disks.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DiskParams {
    /// Mean seek (latency) time, ms: the mean of the seek-time density (10).
    pub seek_mean_ms: f64,
    /// Transfer rate once positioned, MB/s (4).
    pub rate_mb_s: f64,
    /// Disks per node, sharing the node's SCSI bus (1 in every experiment of the paper).
    pub per_node: u32,
}

/// The SCSI buses.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ScsiParams {
    /// Sustained transfer rate, MB/s (18.4: fast-wide SCSI-2, 20 MB/s raw).
    pub rate_mb_s: f64,
}

/// The backplane bus, charged per bus transfer.
///
/// The defaults reproduce Table 2: `I/O.WriteToMemory` is one DMA transfer at 38.9 MB/s;
/// `Processor.ReadFromMemory` is one read transfer (a cache fill) at 100 MB/s;
/// `Processor.WriteToMemory` is a fill followed by a write-back (§3.5: "a write-to-memory
/// operation requires two bus transfers"), so with a 150 MB/s write-back it runs at
/// `1/(1/100 + 1/150) = 60` MB/s. The paper measured 160 MB/s for a pure write-back.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BusParams {
    /// One read transfer from memory (a cache fill, or a device's DMA read), MB/s (100).
    pub read_transfer_mb_s: f64,
    /// One write-back of a dirty cache line, MB/s (150).
    pub write_back_mb_s: f64,
    /// One DMA write from an I/O controller into memory, MB/s (38.9, Table 1 and 2).
    pub io_write_mb_s: f64,
    /// Raw bus throughput, used for control messages, MB/s (400: 8 bytes at 50 MHz).
    pub raw_mb_s: f64,
}

/// One kind of bus transfer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Transfer {
    /// A read from memory: a cache fill or a device's DMA read ([`BusParams::read_transfer_mb_s`]).
    Read,
    /// A write-back of a dirty cache line ([`BusParams::write_back_mb_s`]).
    WriteBack,
    /// A DMA write from an I/O controller ([`BusParams::io_write_mb_s`]).
    IoWrite,
    /// A raw bus transfer ([`BusParams::raw_mb_s`]).
    Raw,
}

/// The bus transfers of each elementary operation that crosses the bus (§3.5, §4).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CacheParams {
    /// A processor reading data from memory (`["read"]`).
    pub processor_read: Vec<Transfer>,
    /// A processor writing data to memory through its write-allocate cache
    /// (`["read", "write_back"]`: the line is filled, overwritten, written back).
    pub processor_write: Vec<Transfer>,
    /// A processor copying memory to memory (`["read", "read", "write_back"]`: source fill,
    /// destination fill, write-back; the paper measured 39.4 MB/s).
    pub memcpy: Vec<Transfer>,
    /// A device (compressor, link, network adapter) reading memory by DMA (`["read"]`).
    pub device_read: Vec<Transfer>,
    /// A controller (SCSI, compressor output) writing memory by DMA (`["io_write"]`).
    pub io_write: Vec<Transfer>,
}

/// The disk-node processors.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ProcessorParams {
    /// Resampling rate, MB/s of input (7.5; the paper measured 7.35 on a Sparc20 and 10 on a
    /// DEC 3400, and §5.2 uses 7.5 MB/s as the rate a processor resamples its strands at). It
    /// is the whole operation's rate, timed end to end, so the resampling's cache-miss bus
    /// transfers take place within it.
    pub resample_mb_s: f64,
    /// Point-to-point read + resample: whether a disk node reads a disk's next strand while its
    /// processor resamples the last (`true`: the pipelining §5.1 describes for the read, giving
    /// 3.2 MB/s per disk with the processors 0.4 busy, as §5.2 reads Figure 6) or only once it
    /// has (`false`, the default: §4's per-strand (a) read, (b) resample, (c) compress, one
    /// strand at a time per disk, compression and the transfer overlapping the next read:
    /// 1.84–1.92 MB/s per disk, §5.2's "≈ 2"). The shared bus's nodes always read ahead ("all
    /// disk nodes generate in parallel strand access requests", §4).
    pub p2p_read_ahead: bool,
}

/// The compression circuits.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CompressorParams {
    /// Input rate, MB/s (7.5 in Table 2; the C-Cube CL-4000 takes 352×240 at 30 frames/s).
    pub input_mb_s: f64,
}

/// The communication links.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LinkParams {
    /// Throughput of one link, MB/s (8: a T9000 link, 100 Mbit/s raw).
    pub rate_mb_s: f64,
    /// Links between the crossbar and the server interface processor (4).
    pub interface_links: u32,
}

/// The server interface processor.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct InterfaceParams {
    /// Rate at which strands arriving on the links are written into its memory, MB/s. Not in
    /// the paper, which only says the interface processor "is far from being saturated" at
    /// 30 MB/s; we take one read transfer's 100 MB/s.
    pub memory_write_mb_s: f64,
    /// The most strand requests the interface processor keeps outstanding at one disk node
    /// (0: no limit). A request is outstanding from when the interface processor sends it until
    /// the node's strand (resampled and compressed, for resample) is in the interface
    /// processor's memory; the node's next strand is requested then. §4 has the interface
    /// processor divide the stream request into strand requests and send them to the nodes,
    /// without saying how many at a time; §5.1's throughput experiment requests "all strands
    /// at the beginning", and its nodes process their strands "in pipeline", so the default is
    /// 0. With 1 a node reads, processes and returns one strand at a time: see
    /// `docs/results/simulate.md` for what that does to the paper's results.
    pub strands_in_flight_per_node: u32,
}

impl Default for Scenario {
    fn default() -> Self {
        Self {
            seed: 1,
            stream: StreamParams::default(),
            disk: DiskParams::default(),
            scsi: ScsiParams::default(),
            bus: BusParams::default(),
            cache: CacheParams::default(),
            processor: ProcessorParams::default(),
            compressor: CompressorParams::default(),
            link: LinkParams::default(),
            interface: InterfaceParams::default(),
        }
    }
}

impl Default for StreamParams {
    fn default() -> Self {
        Self {
            frame_width_px: 352,
            frame_height_px: 240,
            bytes_per_pixel: 2,
            frames: 256,
            frames_per_strand: 1,
            disk_requests_per_strand: 1,
            resample_factor: 4.0,
            compression_factor: 15.0,
            control_message_bytes: 64,
        }
    }
}

impl Default for DiskParams {
    fn default() -> Self {
        Self { seek_mean_ms: 10.0, rate_mb_s: 4.0, per_node: 1 }
    }
}

impl Default for ScsiParams {
    fn default() -> Self {
        Self { rate_mb_s: 18.4 }
    }
}

impl Default for BusParams {
    fn default() -> Self {
        Self {
            read_transfer_mb_s: 100.0,
            write_back_mb_s: 150.0,
            io_write_mb_s: 38.9,
            raw_mb_s: 400.0,
        }
    }
}

impl Default for CacheParams {
    fn default() -> Self {
        use Transfer::{IoWrite, Read, WriteBack};
        Self {
            processor_read: vec![Read],
            processor_write: vec![Read, WriteBack],
            memcpy: vec![Read, Read, WriteBack],
            device_read: vec![Read],
            io_write: vec![IoWrite],
        }
    }
}

impl Default for ProcessorParams {
    fn default() -> Self {
        Self { resample_mb_s: 7.5, p2p_read_ahead: false }
    }
}

impl Default for CompressorParams {
    fn default() -> Self {
        Self { input_mb_s: 7.5 }
    }
}

impl Default for LinkParams {
    fn default() -> Self {
        Self { rate_mb_s: 8.0, interface_links: 4 }
    }
}

impl Default for InterfaceParams {
    fn default() -> Self {
        Self { memory_write_mb_s: 100.0, strands_in_flight_per_node: 0 }
    }
}

/// Why a scenario is not usable.
#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    /// Not TOML, or a key that is unknown or of the wrong type (the message names it and gives
    /// its line).
    #[error("scenario: {0}")]
    Toml(toml::de::Error),
    /// A value out of range.
    #[error("scenario: {key} = {value}: {why}")]
    Invalid {
        /// The key at fault, with its table (`disk.rate_mb_s`).
        key: &'static str,
        /// The value found.
        value: String,
        /// What it must be.
        why: &'static str,
    },
}

impl Scenario {
    /// Parses a scenario: keys absent from `text` keep the paper's values; unknown keys and
    /// out-of-range values are errors naming the key.
    pub fn from_toml(text: &str) -> Result<Self, ScenarioError> {
        let s: Self = toml::from_str(text).map_err(ScenarioError::Toml)?;
        s.validate()?;
        Ok(s)
    }

    /// The scenario as TOML text (every key).
    #[must_use]
    pub fn to_toml(&self) -> String {
        // Serialising plain numbers, lists and tables cannot fail.
        toml::to_string(self).unwrap_or_default()
    }

    /// Checks every value is in range.
    pub fn validate(&self) -> Result<(), ScenarioError> {
        let positive = [
            ("disk.rate_mb_s", self.disk.rate_mb_s),
            ("scsi.rate_mb_s", self.scsi.rate_mb_s),
            ("bus.read_transfer_mb_s", self.bus.read_transfer_mb_s),
            ("bus.write_back_mb_s", self.bus.write_back_mb_s),
            ("bus.io_write_mb_s", self.bus.io_write_mb_s),
            ("bus.raw_mb_s", self.bus.raw_mb_s),
            ("processor.resample_mb_s", self.processor.resample_mb_s),
            ("compressor.input_mb_s", self.compressor.input_mb_s),
            ("link.rate_mb_s", self.link.rate_mb_s),
            ("interface.memory_write_mb_s", self.interface.memory_write_mb_s),
        ];
        for (key, v) in positive {
            if !(v.is_finite() && v > 0.0) {
                return Err(invalid(key, v, "must be a positive number"));
            }
        }
        if !(self.disk.seek_mean_ms.is_finite() && self.disk.seek_mean_ms >= 0.0) {
            return Err(invalid("disk.seek_mean_ms", self.disk.seek_mean_ms, "must be ≥ 0"));
        }
        let at_least_one = [
            ("disk.per_node", self.disk.per_node),
            ("link.interface_links", self.link.interface_links),
            ("stream.frame_width_px", self.stream.frame_width_px),
            ("stream.frame_height_px", self.stream.frame_height_px),
            ("stream.bytes_per_pixel", self.stream.bytes_per_pixel),
            ("stream.frames", self.stream.frames),
            ("stream.frames_per_strand", self.stream.frames_per_strand),
            ("stream.disk_requests_per_strand", self.stream.disk_requests_per_strand),
        ];
        for (key, v) in at_least_one {
            if v == 0 {
                return Err(invalid(key, v, "must be at least 1"));
            }
        }
        for (key, v) in [
            ("stream.resample_factor", self.stream.resample_factor),
            ("stream.compression_factor", self.stream.compression_factor),
        ] {
            if !(v.is_finite() && v >= 1.0) {
                return Err(invalid(key, v, "must be a number ≥ 1"));
            }
        }
        for (key, v) in [
            ("cache.processor_read", &self.cache.processor_read),
            ("cache.processor_write", &self.cache.processor_write),
            ("cache.memcpy", &self.cache.memcpy),
            ("cache.device_read", &self.cache.device_read),
            ("cache.io_write", &self.cache.io_write),
        ] {
            if v.is_empty() {
                return Err(invalid(key, "[]", "must list at least one bus transfer"));
            }
        }
        Ok(())
    }

    /// Bytes in one frame.
    #[must_use]
    pub fn frame_bytes(&self) -> u64 {
        u64::from(self.stream.frame_width_px)
            * u64::from(self.stream.frame_height_px)
            * u64::from(self.stream.bytes_per_pixel)
    }

    /// Bytes in one strand.
    #[must_use]
    pub fn strand_bytes(&self) -> u64 {
        self.frame_bytes() * u64::from(self.stream.frames_per_strand)
    }

    /// Strands in the stream (the last one may hold fewer frames; the experiments use whole
    /// strands: `frames / frames_per_strand`, rounded up).
    #[must_use]
    pub fn strands(&self) -> u32 {
        self.stream.frames.div_ceil(self.stream.frames_per_strand)
    }

    /// The mean seek time.
    #[must_use]
    pub fn seek_mean(&self) -> Duration {
        Duration::from_secs_f64(self.disk.seek_mean_ms / 1e3)
    }

    /// The rate of one bus transfer of kind `t`.
    #[must_use]
    pub fn transfer_rate(&self, t: Transfer) -> MbPerSec {
        MbPerSec(match t {
            Transfer::Read => self.bus.read_transfer_mb_s,
            Transfer::WriteBack => self.bus.write_back_mb_s,
            Transfer::IoWrite => self.bus.io_write_mb_s,
            Transfer::Raw => self.bus.raw_mb_s,
        })
    }

    /// Seconds of bus time an elementary operation made of `transfers` costs per byte.
    #[must_use]
    pub fn bus_secs_per_byte(&self, transfers: &[Transfer]) -> f64 {
        transfers.iter().map(|t| self.transfer_rate(*t).secs_for(1.0)).sum()
    }

    /// The throughput of an elementary operation made of `transfers` on an idle bus.
    #[must_use]
    pub fn bus_op_rate(&self, transfers: &[Transfer]) -> MbPerSec {
        MbPerSec::from_bytes_per_sec(1.0 / self.bus_secs_per_byte(transfers))
    }
}

fn invalid(key: &'static str, value: impl ToString, why: &'static str) -> ScenarioError {
    ScenarioError::Invalid { key, value: value.to_string(), why }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_table_2() {
        let s = Scenario::default();
        assert_eq!(s.frame_bytes(), 168_960);
        assert_eq!(s.strands(), 256);
        // Table 2: I/O.WriteToMemory 38.9, Processor.WriteToMemory 60, ReadFromMemory 100.
        assert!((s.bus_op_rate(&s.cache.io_write).0 - 38.9).abs() < 1e-9);
        assert!((s.bus_op_rate(&s.cache.processor_write).0 - 60.0).abs() < 1e-9);
        assert!((s.bus_op_rate(&s.cache.processor_read).0 - 100.0).abs() < 1e-9);
        // memcpy: three transfers, 37.5 MB/s (measured 39.4, estimated 40).
        assert!((s.bus_op_rate(&s.cache.memcpy).0 - 37.5).abs() < 1e-9);
    }

    #[test]
    fn the_shipped_file_is_the_default() {
        let text = include_str!("../../../config/sim-gennart.toml");
        assert_eq!(Scenario::from_toml(text).unwrap(), Scenario::default());
    }

    #[test]
    fn a_partial_file_overrides_only_its_keys() {
        let s = Scenario::from_toml("seed = 7\n[disk]\nrate_mb_s = 8.0\n").unwrap();
        assert_eq!(s.seed, 7);
        assert_eq!(s.disk.rate_mb_s, 8.0);
        assert_eq!(s.disk.seek_mean_ms, 10.0);
        assert_eq!(s.link, LinkParams::default());
        let s = Scenario::from_toml("[cache]\nprocessor_write = [\"write_back\"]\n").unwrap();
        assert_eq!(s.cache.processor_write, vec![Transfer::WriteBack]);
    }

    #[test]
    fn unknown_keys_are_named() {
        let e = Scenario::from_toml("[disk]\nseek_ms = 3\n").unwrap_err().to_string();
        assert!(e.contains("seek_ms"), "{e}");
        let e = Scenario::from_toml("turbo = true\n").unwrap_err().to_string();
        assert!(e.contains("turbo"), "{e}");
        let e = Scenario::from_toml("[cache]\nmemcpy = [\"teleport\"]\n").unwrap_err().to_string();
        assert!(e.contains("teleport"), "{e}");
    }

    #[test]
    fn bad_values_are_named() {
        let e = Scenario::from_toml("[link]\nrate_mb_s = 0.0\n").unwrap_err().to_string();
        assert!(e.contains("link.rate_mb_s = 0"), "{e}");
        let e = Scenario::from_toml("[stream]\nframes = 0\n").unwrap_err().to_string();
        assert!(e.contains("stream.frames"), "{e}");
        let e = Scenario::from_toml("[cache]\nmemcpy = []\n").unwrap_err().to_string();
        assert!(e.contains("cache.memcpy"), "{e}");
    }

    #[test]
    fn toml_round_trip() {
        let s = Scenario::default();
        assert_eq!(Scenario::from_toml(&s.to_toml()).unwrap(), s);
    }
}
