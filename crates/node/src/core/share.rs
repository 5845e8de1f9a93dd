//! This node's shares: its part of every session, its own and other origins' (Yima §2.2).
//! Admission at its scheduler, the start of each run, and the cluster's takeover rules
//! (`docs/design/takeover.md`): a lost node's blocks taken over by the holders of their next
//! copies, given back when it returns, withheld while another node sends them.

use super::{
    Anchor, Arc, BTreeSet, BlockIndex, Dest, DiskId, Instant, LocalAction, LocalAnchor, MediaTime,
    NodeCore, NodeId, NodeOutput, ObjectEntry, OpenStream, PlayRun, Position, ReadOp, Refusal,
    Role, RtcpMode, RtxSetup, RunId, RunSpec, RunTracks, SeqOffsets, SessionTransport, Share,
    ShareBlock, ShareFailure, ShareKey, StreamId, StreamOp, StreamSetup, TrackStamp, Transport,
    WithheldPart,
};
use isochron_rtsp::sdp::rtx_payload_types;
use isochron_sched::{ObjectPlan, PlannedBlock};
use tracing::info;

/// The RTX stream's SSRC is the media SSRC with these bits flipped: distinct from it, and from
/// every other session's with all but negligible probability (SSRCs are random).
const RTX_SSRC_MASK: u32 = 0x5254_5800;

/// What the takeover rules did on this node (`docs/design/takeover.md`), for the metrics: a
/// flapping network or a node that keeps dying shows here.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TakeoverStats {
    /// Parts of sessions this node took over from a lost node.
    pub taken_over: u64,
    /// Parts it gave back to a node that returned.
    pub given_back: u64,
    /// Times its own part of a session was taken over and it held it back.
    pub withheld: u64,
}

impl NodeCore {
    pub(super) fn local(&mut self, now: Instant, action: LocalAction) {
        match action {
            LocalAction::Admit { key, object, epoch, avg_bitrate, peak_bitrate, lost, open } => {
                let entry =
                    self.catalog.by_id(object).or_else(|| self.catalog.shared_entry(object));
                let entry = entry.map(|e| self.catalog.at_epoch(e, epoch));
                let entry = match entry.map(|e| self.without_lost(now, e, &lost)) {
                    Some(Ok(entry)) => entry,
                    Some(Err(reason)) => return self.refuse_share(now, key, reason),
                    None => {
                        let reason = format!("object {object} is not in this node's library");
                        return self.refuse_share(now, key, reason);
                    }
                };
                let stream = if key.origin == self.cluster.node() {
                    key.stream
                } else {
                    self.rtsp.allocate_stream()
                };
                let req = OpenStream {
                    stream,
                    plan: Arc::clone(&entry.plan),
                    avg_bitrate,
                    peak_bitrate,
                    local: self.local_disks.clone(),
                };
                let name = entry.record.name.clone();
                self.shares.insert(
                    key,
                    Share {
                        stream,
                        entry,
                        open,
                        added: false,
                        run: RunId(0),
                        ended: false,
                        withheld: None,
                    },
                );
                self.share_of.insert(stream, key);
                self.out.push_back(NodeOutput::Admit { key, open, req, name });
            }
            LocalAction::Start { key, run, spec, anchor } => {
                self.start_share(now, key, run, &spec, anchor);
            }
            LocalAction::Stop { key, run, cutoff, before } => {
                let Some(stream) = self.shares.get(&key).map(|s| s.stream) else { return };
                self.send(StreamOp::Stop { stream, run, cutoff, before });
            }
            LocalAction::Pace { key, run, anchor, pace } => {
                let Some(stream) = self.shares.get(&key).map(|s| s.stream) else { return };
                self.send(match anchor {
                    Some(a) => StreamOp::Reanchor {
                        stream,
                        run,
                        anchor: Anchor { wall: a.wall, media: a.media },
                        pace,
                    },
                    None => StreamOp::Pace { stream, pace },
                });
            }
            LocalAction::Bye { key } => {
                if let Some(stream) = self.shares.get(&key).map(|s| s.stream) {
                    self.send(StreamOp::Bye { stream, reason: None });
                }
            }
            LocalAction::Close { key } => self.forget_share(key),
            LocalAction::TakeOver { key, run, dead, from, cause } => {
                self.take_over(now, key, run, &dead, from);
                self.takeover_stats.taken_over += 1;
                info!(%key, %run, ?dead, ?from, ?cause, "taking over a lost node's part of a session");
            }
            LocalAction::GiveBack { key, run, dead, node, at } => {
                let given = self.give_back(now, key, run, &dead, node, at);
                self.takeover_stats.given_back += 1;
                info!(%key, %run, %node, ?at, given, "a lost node is back: giving its part of a session back");
            }
            LocalAction::Withhold { key, run, from, takers, until, lost_besides } => {
                let blocks = self.withheld_blocks(
                    now,
                    key,
                    run,
                    from,
                    takers.as_ref(),
                    lost_besides.as_ref(),
                );
                let Some(blocks) = blocks else { return };
                let Some(share) = self.shares.get_mut(&key) else { return };
                let stream = share.stream;
                let set = blocks.as_ref().map(|b| b.iter().copied().collect());
                share.withheld = Some(WithheldPart { blocks: set, until });
                let n = blocks.as_ref().map(Vec::len);
                self.send(StreamOp::Withhold { stream, run, from, blocks, until });
                self.takeover_stats.withheld += 1;
                info!(%key, %run, ?from, ?takers, ?until, blocks = ?n, "this node's part of a session was taken over: holding it back");
            }
            LocalAction::Freeze { key, run } | LocalAction::Thaw { key, run } => {
                let frozen = matches!(action, LocalAction::Freeze { .. });
                let Some(share) = self.shares.get(&key).filter(|s| s.run == run) else { return };
                let stream = share.stream;
                self.send(StreamOp::Freeze { stream, run, frozen });
                if frozen {
                    info!(%key, %run, "the origin of a relayed session is silent: waiting for it");
                } else {
                    info!(%key, %run, "the origin of a relayed session speaks again: going on");
                }
            }
            LocalAction::Release { key, run, at } => {
                let Some(share) = self.shares.get_mut(&key).filter(|s| s.run == run) else {
                    return;
                };
                if let Some(w) = share.withheld.as_mut() {
                    w.until = Some(at);
                }
                let stream = share.stream;
                self.send(StreamOp::Release { stream, run, at });
                info!(%key, %run, ?at, "taking this node's part of a session back");
            }
        }
    }

    /// Refuses share `key` on this node's behalf, for `reason`.
    fn refuse_share(&mut self, now: Instant, key: ShareKey, reason: String) {
        let node = self.cluster.config().name.clone();
        self.cluster.handle_admitted(now, key, Err(Refusal { node, disk: None, reason }));
    }

    /// The names of the members not in `dead`: a disk whose owner is not among them is out of
    /// a session whose lost members are `dead` (lost, or removed from the cluster).
    fn alive_names(&self, now: Instant, dead: &BTreeSet<NodeId>) -> BTreeSet<String> {
        self.cluster.members(now).filter(|m| !dead.contains(&m.id)).map(|m| m.name).collect()
    }

    /// The blocks of the share's plan from `from` on that were taken over from this node: those
    /// whose next copy (the first on another node) is on one of `takers` (`None`: any), and,
    /// with `lost_besides`, of its own part as the takers see it (the first copy off those
    /// members is on this node). `Some(None)`: every block of its part. `None` for a share not
    /// running `run`.
    fn withheld_blocks(
        &self,
        now: Instant,
        key: ShareKey,
        run: RunId,
        from: MediaTime,
        takers: Option<&BTreeSet<NodeId>>,
        lost_besides: Option<&BTreeSet<NodeId>>,
    ) -> Option<Option<Vec<BlockIndex>>> {
        let share = self.shares.get(&key).filter(|s| s.run == run)?;
        let Some(local) = self.local_disks.as_ref() else { return Some(None) };
        if takers.is_none() && lost_besides.is_none() {
            return Some(None);
        }
        let owners = self.catalog.disk_owners();
        let names = |ids: &BTreeSet<NodeId>| -> BTreeSet<String> {
            self.cluster.members(now).filter(|m| ids.contains(&m.id)).map(|m| m.name).collect()
        };
        let takers = takers.map(names);
        let alive = lost_besides.map(|lost| self.alive_names(now, lost));
        let taken = |b: &PlannedBlock| {
            takers.as_ref().is_none_or(|t| {
                let next = b.copies.iter().find(|d| !local.contains(d));
                next.and_then(|d| owners.get(&d)).is_some_and(|o| t.contains(o))
            })
        };
        let own = |b: &PlannedBlock| {
            alive.as_ref().is_none_or(|alive| {
                let first =
                    b.copies.iter().find(|d| owners.get(d).is_none_or(|o| alive.contains(o)));
                first.is_some_and(|d| local.contains(&d))
            })
        };
        let plan = &share.entry.plan;
        let first = plan.blocks.partition_point(|b| b.first_send_time <= from).saturating_sub(1);
        let blocks = plan.blocks.iter().enumerate().skip(first).filter(|(_, b)| taken(b) && own(b));
        Some(Some(blocks.map(|(i, _)| BlockIndex(i as u32)).collect()))
    }

    /// Carries out [`LocalAction::GiveBack`]: the blocks after the one holding `at` that this
    /// node took over only because `node` was lost go back to the scheduler, which stops
    /// reading those it has not reached, and the pacer passes over every packet of them, those
    /// read ahead too (`node` sends them whole). Returns how many were named.
    fn give_back(
        &mut self,
        now: Instant,
        key: ShareKey,
        run: RunId,
        dead: &BTreeSet<NodeId>,
        node: NodeId,
        at: MediaTime,
    ) -> usize {
        let (Some(local), Some(share)) = (self.local_disks.as_ref(), self.shares.get(&key)) else {
            return 0;
        };
        if share.run != run {
            return 0;
        }
        // One snapshot of the store's disk owners for the whole decision.
        let owners = self.catalog.disk_owners();
        let still = self.alive_names(now, dead);
        let mut with_node = dead.clone();
        with_node.insert(node);
        let before = self.alive_names(now, &with_node);
        let is_out = |d: DiskId, alive: &BTreeSet<String>| {
            owners.get(&d).is_some_and(|o| !alive.contains(o))
        };
        let plan = &share.entry.plan;
        let holding = plan.blocks.partition_point(|b| b.first_send_time <= at).saturating_sub(1);
        let now_mine: BTreeSet<BlockIndex> =
            taken_blocks(plan, local, |d| is_out(d, &still), at).iter().map(|b| b.index).collect();
        let blocks: Vec<BlockIndex> = taken_blocks(plan, local, |d| is_out(d, &before), at)
            .iter()
            .map(|b| b.index)
            .filter(|i| i.0 as usize > holding && !now_mine.contains(i))
            .collect();
        if blocks.is_empty() {
            return 0;
        }
        let n = blocks.len();
        // Those read already (the lookahead) are not sent either: their node sends them whole.
        let stream = share.stream;
        self.send(StreamOp::PassOver { stream, run, blocks: blocks.clone() });
        self.read(ReadOp::GiveBack { stream, run, blocks });
        n
    }

    /// Carries out [`LocalAction::TakeOver`]: the blocks of the share's plan from `from` on
    /// whose first copy on a live node is on this node's disks (and that are not already its
    /// own) go to the scheduler (reads) and the pacer (sends) of the running share.
    fn take_over(
        &mut self,
        now: Instant,
        key: ShareKey,
        run: RunId,
        dead: &BTreeSet<NodeId>,
        from: MediaTime,
    ) {
        let (Some(local), Some(share)) = (self.local_disks.as_ref(), self.shares.get(&key)) else {
            return;
        };
        if share.run != run {
            return;
        }
        // Out of the session: its lost members, and nodes no longer members at all (removed).
        let owners = self.catalog.disk_owners();
        let alive = self.alive_names(now, dead);
        let is_dead = |d: DiskId| owners.get(&d).is_some_and(|o| !alive.contains(o));
        let plan = &share.entry.plan;
        // On the session's origin, a block from here on with no copy left: nobody can send
        // it, and the session must not go on with a hole. Only the origin says so: a member
        // cut off from the others would find every block without a copy, and its share (an
        // orphan then) would close, though the others still send.
        let first = plan.blocks.partition_point(|b| b.first_send_time <= from).saturating_sub(1);
        let orphan = plan.blocks[first..].iter().position(|b| b.copies.iter().all(is_dead));
        if let Some(i) = orphan.filter(|_| key.origin == self.cluster.node()) {
            let error = ShareFailure::NoCopy(BlockIndex((first + i) as u32));
            self.cluster.handle_share_failed(now, key, run, &error);
            return;
        }
        let mut blocks = taken_blocks(plan, local, is_dead, from);
        let owner_dead = |d: DiskId| owners.get(&d).is_some_and(|o| !alive.contains(o));
        if let Some(w) = share.withheld.as_ref() {
            // Its own blocks withheld for a taker lost now: nobody else sends them.
            blocks.extend(reclaimed_blocks(plan, local, w, owner_dead, from));
            blocks.sort_unstable_by_key(|b| b.index);
        }
        let stream = share.stream;
        // A share that ended before the loss goes on with the blocks it gains: the pacer
        // revives its run, the scheduler reads them from the first on the session's clock.
        let revive = share.ended && !blocks.is_empty();
        let restart =
            blocks.first().map(|b| (b.index, plan.blocks[b.index.0 as usize].first_send_time));
        if !blocks.is_empty() {
            let indices: Vec<BlockIndex> = blocks.iter().map(|b| b.index).collect();
            self.send(StreamOp::Extend { stream, run, blocks, from });
            if let (true, Some((a, pace)), Some((first, media))) =
                (revive, self.cluster.share_clock(key), restart)
            {
                let anchor = Anchor { wall: a.wall, media: a.media };
                let pinned = Some((anchor, pace));
                self.read(ReadOp::Start { stream, run, from: first, media, pinned });
            }
            self.read(ReadOp::TakeOver { stream, run, blocks: indices });
        }
        if let Some(share) = self.shares.get_mut(&key).filter(|_| revive) {
            share.ended = false;
        }
        self.cluster.handle_taken_over(now, key, run, revive);
    }

    fn start_share(
        &mut self,
        now: Instant,
        key: ShareKey,
        run: RunId,
        spec: &RunSpec,
        anchor: Option<LocalAnchor>,
    ) {
        let me = self.cluster.node();
        let Some(share) = self.shares.get_mut(&key) else { return };
        let stream = share.stream;
        share.run = run;
        share.ended = false;
        share.withheld = None;
        let from = share.entry.plan.block_of(spec.start.gsn).unwrap_or(BlockIndex(0));
        if !share.added {
            let plan = Arc::clone(&share.entry.plan);
            match self.stream_setup(key, stream, spec, &plan) {
                Some(add) => self.out.push_back(add),
                None => {
                    self.cluster.handle_share_failed(now, key, run, &ShareFailure::NoTransport);
                    return;
                }
            }
            if let Some(share) = self.shares.get_mut(&key) {
                share.added = true;
            }
        }
        let anchor = anchor.map(|a| Anchor { wall: a.wall, media: a.media });
        if anchor.is_none() {
            // The scheduler pins the clock: the pacer reports the pace with the anchor. Every
            // run sets it (a trick or Speed run leaves its own behind).
            self.send(StreamOp::Pace { stream, pace: spec.pace });
        }
        // Rate pacing, at the mean rate of the object this run plays (a switch of rendition
        // changes it); `None` keeps it off.
        if let Some(o) = self.origins.get(&key.stream).filter(|o| o.smooth && key.origin == me) {
            let rate = super::origin::mean_byte_rate(&o.entry.record);
            self.send(StreamOp::Smooth { stream, rate });
        }
        let play = PlayRun {
            run,
            start: spec.start,
            from,
            end: spec.end,
            seq_offsets: seq_offsets(&spec.tracks),
            anchor,
            trick: spec.trick,
        };
        self.send(StreamOp::Play { stream, play });
        let pinned = anchor.map(|a| (a, spec.pace));
        let media = spec.start.time;
        self.read(ReadOp::Start { stream, run, from, media, pinned });
    }

    /// The sender's [`NodeOutput::AddStream`] for share `key`'s stream `stream`: each enabled track's
    /// transport, the share's blocks and RTCP role. `None`: a track has no way to its client.
    fn stream_setup(
        &self,
        key: ShareKey,
        stream: StreamId,
        spec: &RunSpec,
        plan: &ObjectPlan,
    ) -> Option<NodeOutput> {
        let me = self.cluster.node();
        let pts: Vec<u8> = spec.tracks.as_slice().iter().map(|t| t.payload_type).collect();
        let rtx_pts = rtx_payload_types(&pts);
        let mut rtx = vec![None; pts.len()];
        let origin_view = (key.origin == me).then(|| self.rtsp.session_by_stream(key.stream));
        let relay = self.relays.get(&key.origin).copied();
        let mut transports: Vec<Option<Transport>> = Vec::new();
        let mut missing = false;
        // The origin of a relayed session: the other nodes' packets come through here.
        let mut relay_origin = false;
        for (i, t) in spec.tracks.as_slice().iter().enumerate() {
            if !t.enabled {
                transports.push(None);
                continue;
            }
            let transport = match t.dest {
                Dest::Udp { rtp, rtcp } => Some(Transport::Udp { rtp, rtcp }),
                Dest::Origin if key.origin == me => {
                    relay_origin = true;
                    let view = origin_view.flatten();
                    let track = view.and_then(|v| v.tracks().find(|tv| tv.index() == i));
                    track.and_then(|tv| {
                        if let SessionTransport::Udp { feedback, .. } = tv.transport() {
                            // A player that chose AVPF took the RTX stream DESCRIBE offered
                            // for the track (the payload types its description gave).
                            rtx[i] = rtx_pts[i].filter(|_| *feedback).map(|payload_type| {
                                RtxSetup { payload_type, ssrc: t.ssrc ^ RTX_SSRC_MASK }
                            });
                        }
                        self.client_transport(tv.transport())
                    })
                }
                // A feeder: RTP to the origin's relay port, RTCP nowhere that matters.
                Dest::Origin => relay.map(|a| Transport::Udp { rtp: a, rtcp: a }),
            };
            missing |= transport.is_none();
            transports.push(transport);
        }
        if missing || transports.iter().all(Option::is_none) {
            return None;
        }
        // A feed's recording in progress (played from disk on a single node) has no known end
        // yet: it reads on as it grows, and learns its last block when the feed ends (`live.rs`).
        let growing = self.local_disks.is_none() && self.is_live(plan.object);
        let last_block = match growing {
            true => BlockIndex(u32::MAX),
            false => BlockIndex(plan.blocks.len().saturating_sub(1) as u32),
        };
        let (blocks, rtcp) = match (spec.role, self.local_disks.as_ref()) {
            (Role::Whole, _) | (_, None) => (None, RtcpMode::AfterPackets),
            (role, Some(disks)) => {
                let blocks: Arc<[ShareBlock]> = plan
                    .blocks
                    .iter()
                    .enumerate()
                    .filter(|(_, b)| disks.contains(&b.disk))
                    .map(|(i, b)| ShareBlock {
                        index: BlockIndex(i as u32),
                        first: Position::at(b.first_gsn, b.first_send_time),
                    })
                    .collect();
                let rtcp = match role {
                    Role::Share { rtcp: true } => RtcpMode::Timer,
                    _ => RtcpMode::None,
                };
                (Some(blocks), rtcp)
            }
        };
        let setup = StreamSetup {
            tracks: spec
                .tracks
                .as_slice()
                .iter()
                .map(|t| TrackStamp {
                    ssrc: t.ssrc,
                    rtp_ts_offset: t.rtp_ts_offset,
                    clock_rate: t.clock_rate,
                    payload_type: t.payload_type,
                    enabled: t.enabled,
                })
                .collect(),
            seq_offsets: seq_offsets(&spec.tracks),
            share: blocks,
            rtcp,
            lsn: spec.lsn,
            ..StreamSetup::whole(stream, 0, 0, 0, last_block)
        };
        // Where the origin asks for relayed packets that did not come (every other node's
        // relay port: only the one that sent a number has it).
        // (A node that paces every block itself, a single node among them, relays nothing.)
        let relay = (relay_origin && spec.role != Role::Whole)
            .then(|| self.relays.iter().filter(|(n, _)| **n != me).map(|(_, a)| *a).collect());
        Some(NodeOutput::AddStream { setup, transports, rtx, relay })
    }

    /// `entry` planned without the members in `lost` (a session opened while they are down):
    /// each block read and sent from its first copy on a live node, which is what this node
    /// admits and sends. `Err`: a block with no copy left, in words for the refusal.
    fn without_lost(
        &self,
        now: Instant,
        entry: Arc<ObjectEntry>,
        lost: &BTreeSet<NodeId>,
    ) -> Result<Arc<ObjectEntry>, String> {
        if self.local_disks.is_none() || lost.is_empty() {
            return Ok(entry);
        }
        let names: BTreeSet<String> =
            self.cluster.members(now).filter(|m| lost.contains(&m.id)).map(|m| m.name).collect();
        let owners = self.catalog.disk_owners();
        let is_lost = |d: DiskId| owners.get(&d).is_some_and(|o| names.contains(o));
        match entry.plan.without(is_lost) {
            Ok(plan) => Ok(Arc::new(ObjectEntry {
                record: entry.record.clone(),
                plan: Arc::new(plan),
                source: entry.source.clone(),
                epoch: entry.epoch,
            })),
            Err(block) => {
                let names: Vec<&str> = names.iter().map(String::as_str).collect();
                Err(format!(
                    "block {block} of {} has no copy on a live node (down: {})",
                    entry.record.name,
                    names.join(", ")
                ))
            }
        }
    }

    pub(super) fn forget_share(&mut self, key: ShareKey) {
        if let Some(share) = self.shares.remove(&key) {
            self.share_of.remove(&share.stream);
            self.send(StreamOp::Remove { stream: share.stream });
            self.read(ReadOp::Close { stream: share.stream });
        }
    }

    pub(super) fn share_key(&self, stream: StreamId, run: RunId) -> Option<ShareKey> {
        let key = *self.share_of.get(&stream)?;
        (self.shares.get(&key)?.run == run).then_some(key)
    }
}

/// A run's per-track sequence offsets, as the pacer takes them.
fn seq_offsets(tracks: &RunTracks) -> SeqOffsets {
    let mut o = SeqOffsets::default();
    for (i, t) in tracks.as_slice().iter().enumerate() {
        o[i] = t.seq_offset;
    }
    o
}

/// The blocks of `plan` a share on `local` disks takes over (`docs/design/takeover.md`): from
/// the block holding media time `from` on, every block not already on a local disk (replica 0)
/// whose first copy on a live disk (`is_dead` false) is local. Every survivor computes this
/// from the same dead set, so each such block has one sender.
fn taken_blocks(
    plan: &ObjectPlan,
    local: &BTreeSet<DiskId>,
    is_dead: impl Fn(DiskId) -> bool,
    from: MediaTime,
) -> Vec<ShareBlock> {
    blocks_from(plan, from)
        .filter(|(_, b)| !local.contains(&b.disk))
        .filter(|(_, b)| b.copies.iter().find(|d| !is_dead(*d)).is_some_and(|d| local.contains(&d)))
        .map(share_block)
        .collect()
}

/// The blocks of `plan` this node withheld (`withheld`) that it sends again from the block
/// holding media time `from` on: its own (replica 0 local) whose next copy, the taker's, is
/// on a node lost now (`taker_dead`), up to the give-back point's block.
fn reclaimed_blocks(
    plan: &ObjectPlan,
    local: &BTreeSet<DiskId>,
    withheld: &WithheldPart,
    taker_dead: impl Fn(DiskId) -> bool,
    from: MediaTime,
) -> Vec<ShareBlock> {
    blocks_from(plan, from)
        .take_while(|(_, b)| withheld.until.is_none_or(|u| b.first_send_time <= u))
        .filter(|(i, b)| {
            local.contains(&b.disk)
                && withheld.blocks.as_ref().is_none_or(|w| w.contains(i))
                && b.copies.iter().find(|d| !local.contains(d)).is_some_and(&taker_dead)
        })
        .map(share_block)
        .collect()
}

/// The blocks of `plan` from the one holding media time `from` on, with their indices.
fn blocks_from(
    plan: &ObjectPlan,
    from: MediaTime,
) -> impl Iterator<Item = (BlockIndex, &PlannedBlock)> {
    let first = plan.blocks.partition_point(|b| b.first_send_time <= from).saturating_sub(1);
    plan.blocks.iter().enumerate().skip(first).map(|(i, b)| (BlockIndex(i as u32), b))
}

/// Block `index` of a plan, `b`, as a share lists it.
fn share_block((index, b): (BlockIndex, &PlannedBlock)) -> ShareBlock {
    ShareBlock { index, first: Position::at(b.first_gsn, b.first_send_time) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_next_live_copy_s_node_takes_a_block_over() {
        use isochron_base::{Bytes, Gsn, ObjectId, Replicas};
        use isochron_sched::{ObjectPlan, PlannedBlock};
        // Disks 0, 1, 2 on nodes a, b, c; two copies of each block; block i's copies on
        // (i, i + 1) mod 3 and 1 s long. This node is b (disk 1); c (disk 2) is lost.
        let blocks = (0..6u16)
            .map(|i| {
                let mut copies = Replicas::single(DiskId(i % 3));
                copies.push(DiskId((i + 1) % 3));
                PlannedBlock {
                    disk: DiskId(i % 3),
                    copies,
                    first_gsn: Gsn(u64::from(i) * 10),
                    first_send_time: MediaTime::from_nanos(u64::from(i) * 1_000_000_000),
                    len: Bytes::kib(64),
                }
            })
            .collect();
        let plan = ObjectPlan { object: ObjectId(1), blocks };
        let local: BTreeSet<DiskId> = [DiskId(1)].into();
        let dead = |d: DiskId| d == DiskId(2);
        let taken = |from_ms: u64| -> Vec<u32> {
            let from = MediaTime::from_nanos(from_ms * 1_000_000);
            taken_blocks(&plan, &local, dead, from).iter().map(|b| b.index.0).collect()
        };
        // Blocks on c first: 2 and 5, copies on (2, 0): a takes them, not b. Blocks on a: not
        // lost. So b takes nothing...
        assert_eq!(taken(0), Vec::<u32>::new());
        // ...and a (disk 0) takes 2 and 5, from the block holding `from` on.
        let local: BTreeSet<DiskId> = [DiskId(0)].into();
        let from = |ms: u64| MediaTime::from_nanos(ms * 1_000_000);
        let a = |ms| {
            taken_blocks(&plan, &local, dead, from(ms))
                .iter()
                .map(|b| b.index.0)
                .collect::<Vec<_>>()
        };
        assert_eq!(a(0), vec![2, 5]);
        assert_eq!(a(2_500), vec![2, 5], "from inside block 2: block 2 again");
        assert_eq!(a(3_000), vec![5]);
        // Both c and a lost: b takes nothing (no live copy of 2 and 5), nor does anyone.
        let dead2 = |d: DiskId| d == DiskId(2) || d == DiskId(0);
        let b: BTreeSet<DiskId> = [DiskId(1)].into();
        let got: Vec<u32> =
            taken_blocks(&plan, &b, dead2, from(0)).iter().map(|x| x.index.0).collect();
        assert_eq!(got, vec![0, 3], "a's blocks 0 and 3 have their second copy on b");
    }
}
