//! Device-independent pieces of the verbs backend: queue-pair attributes as plain
//! structs (copied into `ibv_qp_attr` by [`super::ffi`]), RNR timer encoding, access
//! flags, GID choice, completion-status mapping and verbs error messages. Everything here
//! is a pure function, unit-tested without hardware.

use std::time::Duration;

use rdma_sys::{ibv_access_flags, ibv_mtu, ibv_wc_status};

use crate::error::Error;
use crate::transport::{Access, WcStatus};

/// `ibv_port_attr.link_layer` of an InfiniBand port.
pub const LINK_LAYER_INFINIBAND: u8 = 1;
/// `ibv_port_attr.link_layer` of an Ethernet (RoCE) port.
pub const LINK_LAYER_ETHERNET: u8 = 2;

/// A port's link layer, for messages.
pub fn link_layer_name(link_layer: u8) -> &'static str {
    match link_layer {
        LINK_LAYER_INFINIBAND => "InfiniBand",
        LINK_LAYER_ETHERNET => "Ethernet (RoCE)",
        _ => "unspecified",
    }
}

/// Local ACK timeout exponent: 4.096 us * 2^14 = 67 ms per try.
pub const ACK_TIMEOUT: u8 = 14;
/// Transport retries before `IBV_WC_RETRY_EXC_ERR` (the maximum; 7 is not "infinite" here).
pub const RETRY_CNT: u8 = 7;
/// Upper bound for outstanding RDMA READs per queue pair, whatever the device allows.
pub const MAX_RD_ATOMIC: u8 = 16;
/// Hop limit of the GRH (RoCE v2: the IP TTL).
pub const HOP_LIMIT: u8 = 64;

/// Duration of each IB `min_rnr_timer` code, in microseconds (IBTA table 45). Code 0 is
/// the longest, 655.36 ms.
pub const RNR_TIMER_US: [u32; 32] = [
    655_360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1_280, 1_920, 2_560, 3_840, 5_120, 7_680,
    10_240, 15_360, 20_480, 30_720, 40_960, 61_440, 81_920, 122_880, 163_840, 245_760, 327_680, 491_520,
];

/// How a receiver-not-ready condition is retried: the responder's `min_rnr_timer` and
/// the requester's `rnr_retry`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RnrParams {
    /// `min_rnr_timer` code (index into [`RNR_TIMER_US`]).
    pub min_rnr_timer: u8,
    /// `rnr_retry`: 0..=6 retries. 7 (retry forever) is never used: the interface
    /// promises that a SEND without a RECV fails within a bounded time.
    pub rnr_retry: u8,
    /// About how long a request waits for a RECV before `IBV_WC_RNR_RETRY_EXC_ERR`.
    pub approx: Duration,
}

/// Encodes [`crate::transport::TransportConfig::rnr_timeout`] as verbs RNR parameters:
/// the shortest timer whose 6 retries cover the timeout, then as few retries as reach
/// it. Zero fails at once; beyond 6 x 655 ms the wait is capped at about 3.9 s.
pub fn rnr_params(timeout: Duration) -> RnrParams {
    if timeout.is_zero() {
        return RnrParams { min_rnr_timer: 1, rnr_retry: 0, approx: Duration::ZERO };
    }
    let total_us = timeout.as_micros().min(u32::MAX as u128) as u64;
    let per_try = total_us.div_ceil(6);
    // Codes 1..=31 grow with the code; code 0 is the longest of all.
    let code = (1..32).find(|&c| RNR_TIMER_US[c] as u64 >= per_try).unwrap_or(0);
    let us = RNR_TIMER_US[code] as u64;
    let retry = total_us.div_ceil(us).clamp(1, 6);
    RnrParams { min_rnr_timer: code as u8, rnr_retry: retry as u8, approx: Duration::from_micros(us * retry) }
}

/// Bytes of an `ibv_mtu` code (1 = 256 ... 5 = 4096), or `None` for an invalid code.
pub fn mtu_bytes(code: u32) -> Option<u32> {
    (ibv_mtu::IBV_MTU_256..=ibv_mtu::IBV_MTU_4096).contains(&code).then(|| 128 << code)
}

/// The `ibv_access_flags` of a region registered with `access`. Verbs refuses
/// `REMOTE_WRITE` without `LOCAL_WRITE`, so a remotely writable region is also locally
/// writable at the device; the backend still enforces [`Access::LOCAL_WRITE`] for
/// receive buffers itself, so the interface's semantics do not change.
pub fn mr_access_flags(access: Access) -> u32 {
    let mut f = 0;
    if access.contains(Access::LOCAL_WRITE) || access.contains(Access::REMOTE_WRITE) {
        f |= ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0;
    }
    if access.contains(Access::REMOTE_WRITE) {
        f |= ibv_access_flags::IBV_ACCESS_REMOTE_WRITE.0;
    }
    if access.contains(Access::REMOTE_READ) {
        f |= ibv_access_flags::IBV_ACCESS_REMOTE_READ.0;
    }
    if access.contains(Access::REMOTE_ATOMIC) {
        f |= ibv_access_flags::IBV_ACCESS_REMOTE_ATOMIC.0;
    }
    f
}

/// The remote rights of `access` alone (what a memory window over a region grants).
pub fn remote_access_flags(access: Access) -> u32 {
    mr_access_flags(access) & !ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0
}

/// The flags of a region peers reach only through a memory window: local write when the
/// window writes (verbs requires it of the region under a window with remote write or
/// atomics), window binding, and no remote right of its own, so the region's own rkey
/// reaches nothing.
pub fn window_region_flags(access: Access) -> u32 {
    let mut f = ibv_access_flags::IBV_ACCESS_MW_BIND.0;
    if access.contains(Access::LOCAL_WRITE)
        || access.contains(Access::REMOTE_WRITE)
        || access.contains(Access::REMOTE_ATOMIC)
    {
        f |= ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0;
    }
    f
}

/// The queue pair's own access flags: it allows everything; each region decides.
pub fn qp_access_flags() -> u32 {
    ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0
        | ibv_access_flags::IBV_ACCESS_REMOTE_WRITE.0
        | ibv_access_flags::IBV_ACCESS_REMOTE_READ.0
        | ibv_access_flags::IBV_ACCESS_REMOTE_ATOMIC.0
}

/// What this side knows about its own port, for building the transitions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LocalPort {
    /// Port number (from 1).
    pub port_num: u8,
    /// LID (InfiniBand; 0 on Ethernet).
    pub lid: u16,
    /// [`LINK_LAYER_INFINIBAND`] or [`LINK_LAYER_ETHERNET`].
    pub link_layer: u8,
    /// Active MTU (`ibv_mtu` code).
    pub active_mtu: u32,
    /// GID table index used as the source GID, when a GRH is used.
    pub gid_index: Option<u8>,
    /// The GID at `gid_index` (zeros without one).
    pub gid: [u8; 16],
    /// RDMA READs this side accepts at once as responder (`max_dest_rd_atomic`).
    pub responder_resources: u8,
    /// RDMA READs this side may have outstanding as requester (`max_rd_atomic`).
    pub initiator_depth: u8,
}

/// What one side tells the other in the handshake (like perftest's `{lid, qpn, psn, gid}`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerInfo {
    /// Queue-pair number (24 bits).
    pub qpn: u32,
    /// First packet sequence number (24 bits).
    pub psn: u32,
    /// LID (InfiniBand).
    pub lid: u16,
    /// GID (RoCE, or InfiniBand across subnets); zeros when none.
    pub gid: [u8; 16],
    /// Active MTU of the sender's port (`ibv_mtu` code).
    pub mtu: u8,
    /// RDMA READs the sender accepts at once as responder.
    pub rd_atomic: u8,
}

/// RESET -> INIT.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InitAttrs {
    /// Port number.
    pub port_num: u8,
    /// P_Key index.
    pub pkey_index: u16,
    /// `qp_access_flags`.
    pub access: u32,
}

/// The global route header of the address vector.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Grh {
    /// Destination GID.
    pub dgid: [u8; 16],
    /// Source GID index.
    pub sgid_index: u8,
    /// Hop limit.
    pub hop_limit: u8,
}

/// INIT -> RTR.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RtrAttrs {
    /// `path_mtu` (`ibv_mtu` code): the smaller of both ports' active MTUs.
    pub path_mtu: u32,
    /// The peer's queue-pair number.
    pub dest_qp_num: u32,
    /// The peer's first PSN.
    pub rq_psn: u32,
    /// Incoming RDMA READs accepted at once.
    pub max_dest_rd_atomic: u8,
    /// RNR NAK timer code this responder advertises.
    pub min_rnr_timer: u8,
    /// Destination LID (InfiniBand).
    pub dlid: u16,
    /// Service level.
    pub sl: u8,
    /// Local port.
    pub port_num: u8,
    /// Set on RoCE (always) and on InfiniBand when a GID index was chosen.
    pub grh: Option<Grh>,
}

/// RTR -> RTS.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RtsAttrs {
    /// Our first PSN.
    pub sq_psn: u32,
    /// Local ACK timeout exponent.
    pub timeout: u8,
    /// Transport retry count.
    pub retry_cnt: u8,
    /// RNR retry count.
    pub rnr_retry: u8,
    /// Outstanding RDMA READs as requester.
    pub max_rd_atomic: u8,
}

/// The RESET -> INIT attributes.
pub fn init_attrs(port: &LocalPort) -> InitAttrs {
    InitAttrs { port_num: port.port_num, pkey_index: 0, access: qp_access_flags() }
}

/// The INIT -> RTR attributes for a connection to `peer`.
pub fn rtr_attrs(port: &LocalPort, peer: &PeerInfo, rnr: &RnrParams) -> Result<RtrAttrs, String> {
    let peer_mtu = peer.mtu as u32;
    if mtu_bytes(peer_mtu).is_none() {
        return Err(format!("peer sent an invalid MTU code {peer_mtu}"));
    }
    if mtu_bytes(port.active_mtu).is_none() {
        return Err(format!("local port reports an invalid active MTU code {}", port.active_mtu));
    }
    let grh = match (port.link_layer, port.gid_index) {
        (LINK_LAYER_ETHERNET, None) => {
            return Err("RoCE needs a source GID but the port has none usable; pick one with --gid-index".into())
        }
        (_, Some(sgid_index)) => {
            if peer.gid == [0; 16] {
                return Err("peer sent no GID, but this side routes by GID (RoCE, or --gid-index given)".into());
            }
            Some(Grh { dgid: peer.gid, sgid_index, hop_limit: HOP_LIMIT })
        }
        (_, None) => {
            if peer.lid == 0 {
                return Err("peer has LID 0 (is its port active and a subnet manager running?); \
                            give --gid-index to route by GID"
                    .into());
            }
            None
        }
    };
    Ok(RtrAttrs {
        path_mtu: port.active_mtu.min(peer_mtu),
        dest_qp_num: peer.qpn & 0xff_ffff,
        rq_psn: peer.psn & 0xff_ffff,
        max_dest_rd_atomic: port.responder_resources.clamp(1, MAX_RD_ATOMIC),
        min_rnr_timer: rnr.min_rnr_timer,
        dlid: peer.lid,
        sl: 0,
        port_num: port.port_num,
        grh,
    })
}

/// The RTR -> RTS attributes: our PSN, retry policy, and as many outstanding READs as
/// both our device and the peer's responder allow.
pub fn rts_attrs(port: &LocalPort, peer: &PeerInfo, sq_psn: u32, rnr: &RnrParams) -> RtsAttrs {
    RtsAttrs {
        sq_psn: sq_psn & 0xff_ffff,
        timeout: ACK_TIMEOUT,
        retry_cnt: RETRY_CNT,
        rnr_retry: rnr.rnr_retry,
        max_rd_atomic: port.initiator_depth.min(peer.rd_atomic).clamp(1, MAX_RD_ATOMIC),
    }
}

/// Picks a source GID on a RoCE port when none was configured. `gids` holds
/// `(index, gid, type)` for the non-empty table entries, with the type as sysfs spells
/// it ("RoCE v2", "IB/RoCE v1") when known. RoCE v2 beats v1 (routable); then an
/// IPv4-mapped GID beats a global IPv6 one, which beats a link-local one; ties go to the
/// lowest index. `None` when every GID is zero.
pub fn pick_gid(gids: &[(u8, [u8; 16], Option<String>)]) -> Option<u8> {
    let score = |gid: &[u8; 16], ty: &Option<String>| -> Option<u32> {
        if *gid == [0; 16] {
            return None;
        }
        let v2 = ty.as_deref().is_some_and(|t| t.to_ascii_lowercase().contains("v2"));
        let ipv4_mapped = gid[..10] == [0; 10] && gid[10] == 0xff && gid[11] == 0xff;
        let link_local = gid[0] == 0xfe && gid[1] & 0xc0 == 0x80;
        let kind = if ipv4_mapped {
            3
        } else if link_local {
            1
        } else {
            2
        };
        Some(if v2 { 10 } else { 0 } + kind)
    };
    let mut best: Option<(u32, u8)> = None;
    for (idx, gid, ty) in gids {
        if let Some(s) = score(gid, ty) {
            let better = match best {
                None => true,
                Some((bs, bi)) => s > bs || (s == bs && *idx < bi),
            };
            if better {
                best = Some((s, *idx));
            }
        }
    }
    best.map(|(_, i)| i)
}

/// Maps an `ibv_wc_status` onto the interface's statuses. Statuses the interface has no
/// name for map to the nearest meaning; the queue pair's error reason keeps the verbs
/// name ([`wc_status_name`]).
pub fn wc_status(code: u32) -> WcStatus {
    use ibv_wc_status::*;
    match code {
        IBV_WC_SUCCESS => WcStatus::Success,
        IBV_WC_LOC_LEN_ERR => WcStatus::LocalLengthError,
        IBV_WC_LOC_PROT_ERR
        | IBV_WC_LOC_ACCESS_ERR
        | IBV_WC_LOC_QP_OP_ERR
        | IBV_WC_LOC_EEC_OP_ERR
        | IBV_WC_LOC_RDD_VIOL_ERR
        | IBV_WC_MW_BIND_ERR => WcStatus::LocalProtectionError,
        IBV_WC_REM_ACCESS_ERR => WcStatus::RemoteAccessError,
        IBV_WC_REM_INV_REQ_ERR | IBV_WC_REM_OP_ERR | IBV_WC_REM_INV_RD_REQ_ERR => WcStatus::RemoteInvalidRequest,
        IBV_WC_RNR_RETRY_EXC_ERR => WcStatus::RnrRetryExceeded,
        // Flushes, and everything that means "the connection is gone": transport retries
        // exhausted (peer dead or unreachable), aborts, fatal and general errors.
        _ => WcStatus::WrFlushError,
    }
}

/// `IBV_EVENT_QP_ACCESS_ERR`: the device refused a peer's one-sided operation on one of
/// this side's queue pairs (counted as an access violation).
pub const EVENT_QP_ACCESS_ERR: u32 = 3;

/// What the backend does about an asynchronous device event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AsyncAction {
    /// A queue pair is broken: move it to the error state (that connection closes).
    FailQp,
    /// The device is gone: every queue pair of the context fails.
    FailAll,
    /// Worth a log line (port changes, completion-queue errors).
    Log,
    /// Routine (connection established, last WQE reached, SQ drained).
    Ignore,
}

/// The name of an `ibv_event_type` and what to do about it.
pub fn async_event(kind: u32) -> (&'static str, AsyncAction) {
    use AsyncAction::*;
    match kind {
        0 => ("IBV_EVENT_CQ_ERR", Log),
        1 => ("IBV_EVENT_QP_FATAL", FailQp),
        2 => ("IBV_EVENT_QP_REQ_ERR", FailQp),
        EVENT_QP_ACCESS_ERR => ("IBV_EVENT_QP_ACCESS_ERR", FailQp),
        4 => ("IBV_EVENT_COMM_EST", Ignore),
        5 => ("IBV_EVENT_SQ_DRAINED", Ignore),
        6 => ("IBV_EVENT_PATH_MIG", Log),
        7 => ("IBV_EVENT_PATH_MIG_ERR", FailQp),
        8 => ("IBV_EVENT_DEVICE_FATAL", FailAll),
        9 => ("IBV_EVENT_PORT_ACTIVE", Log),
        10 => ("IBV_EVENT_PORT_ERR", Log),
        11 => ("IBV_EVENT_LID_CHANGE", Log),
        12 => ("IBV_EVENT_PKEY_CHANGE", Log),
        13 => ("IBV_EVENT_SM_CHANGE", Log),
        14 => ("IBV_EVENT_SRQ_ERR", Log),
        15 => ("IBV_EVENT_SRQ_LIMIT_REACHED", Ignore),
        16 => ("IBV_EVENT_QP_LAST_WQE_REACHED", Ignore),
        17 => ("IBV_EVENT_CLIENT_REREGISTER", Log),
        18 => ("IBV_EVENT_GID_CHANGE", Log),
        19 => ("IBV_EVENT_WQ_FATAL", Log),
        _ => ("unknown ibv_event_type", Log),
    }
}

/// The verbs name of an `ibv_wc_status`, for error reasons.
pub fn wc_status_name(code: u32) -> &'static str {
    use ibv_wc_status::*;
    match code {
        IBV_WC_SUCCESS => "IBV_WC_SUCCESS",
        IBV_WC_LOC_LEN_ERR => "IBV_WC_LOC_LEN_ERR",
        IBV_WC_LOC_QP_OP_ERR => "IBV_WC_LOC_QP_OP_ERR",
        IBV_WC_LOC_EEC_OP_ERR => "IBV_WC_LOC_EEC_OP_ERR",
        IBV_WC_LOC_PROT_ERR => "IBV_WC_LOC_PROT_ERR",
        IBV_WC_WR_FLUSH_ERR => "IBV_WC_WR_FLUSH_ERR",
        IBV_WC_MW_BIND_ERR => "IBV_WC_MW_BIND_ERR",
        IBV_WC_BAD_RESP_ERR => "IBV_WC_BAD_RESP_ERR",
        IBV_WC_LOC_ACCESS_ERR => "IBV_WC_LOC_ACCESS_ERR",
        IBV_WC_REM_INV_REQ_ERR => "IBV_WC_REM_INV_REQ_ERR",
        IBV_WC_REM_ACCESS_ERR => "IBV_WC_REM_ACCESS_ERR",
        IBV_WC_REM_OP_ERR => "IBV_WC_REM_OP_ERR",
        IBV_WC_RETRY_EXC_ERR => "IBV_WC_RETRY_EXC_ERR",
        IBV_WC_RNR_RETRY_EXC_ERR => "IBV_WC_RNR_RETRY_EXC_ERR",
        IBV_WC_LOC_RDD_VIOL_ERR => "IBV_WC_LOC_RDD_VIOL_ERR",
        IBV_WC_REM_INV_RD_REQ_ERR => "IBV_WC_REM_INV_RD_REQ_ERR",
        IBV_WC_REM_ABORT_ERR => "IBV_WC_REM_ABORT_ERR",
        IBV_WC_INV_EECN_ERR => "IBV_WC_INV_EECN_ERR",
        IBV_WC_INV_EEC_STATE_ERR => "IBV_WC_INV_EEC_STATE_ERR",
        IBV_WC_FATAL_ERR => "IBV_WC_FATAL_ERR",
        IBV_WC_RESP_TIMEOUT_ERR => "IBV_WC_RESP_TIMEOUT_ERR",
        IBV_WC_GENERAL_ERR => "IBV_WC_GENERAL_ERR",
        _ => "unknown ibv_wc_status",
    }
}

/// The errno behind a verbs return code. Verbs that return an int give the errno itself
/// (`ibv_modify_qp`, `ibv_post_send`, ...), some providers return -1 and set `errno`,
/// and a few return `-errno`. `last` is `errno` read right after the call. Never 0:
/// an unexplained failure reads as EIO.
pub fn errno_of(rc: i32, last: i32) -> i32 {
    let e = if rc > 0 {
        rc
    } else if rc < -1 {
        rc.checked_neg().unwrap_or(libc::EIO)
    } else {
        last
    };
    if e == 0 {
        libc::EIO
    } else {
        e
    }
}

/// "`verb`: `strerror(errno)` (errno `errno`)", e.g.
/// "ibv_create_qp: Cannot allocate memory (errno 12)".
pub fn verb_message(verb: &str, errno: i32) -> String {
    let text = std::io::Error::from_raw_os_error(errno).to_string();
    let text = text.split(" (os error").next().unwrap_or(&text).to_string();
    format!("{verb}: {text} (errno {errno})")
}

/// A transport error for a failed verb.
pub fn verb_error(verb: &str, errno: i32) -> Error {
    Error::Transport(verb_message(verb, errno))
}

/// The error for a machine without RDMA devices. `cause` is the failed device list
/// call's errno, if it failed rather than returning an empty list.
pub fn no_device_error(cause: Option<i32>) -> Error {
    let mut msg = String::from("no RDMA device found; use --transport shm or tcp");
    if let Some(e) = cause {
        msg.push_str(&format!(" ({})", verb_message("ibv_get_device_list", e)));
    }
    Error::Transport(msg)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn port(link_layer: u8, gid_index: Option<u8>) -> LocalPort {
        LocalPort {
            port_num: 1,
            lid: 7,
            link_layer,
            active_mtu: ibv_mtu::IBV_MTU_4096,
            gid_index,
            gid: [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8],
            responder_resources: 16,
            initiator_depth: 16,
        }
    }

    fn peer() -> PeerInfo {
        PeerInfo {
            qpn: 0x1234,
            psn: 0xabcdef,
            lid: 9,
            gid: [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 5],
            mtu: ibv_mtu::IBV_MTU_1024 as u8,
            rd_atomic: 4,
        }
    }

    #[test]
    fn rnr_encoding_covers_the_timeout_and_stays_bounded() {
        let z = rnr_params(Duration::ZERO);
        assert_eq!((z.rnr_retry, z.approx), (0, Duration::ZERO));
        for ms in [1u64, 5, 50, 100, 250, 1000, 2000, 3900] {
            let p = rnr_params(Duration::from_millis(ms));
            assert!(p.rnr_retry >= 1 && p.rnr_retry <= 6, "{ms} ms: {p:?}");
            assert!(p.approx >= Duration::from_millis(ms), "{ms} ms: {p:?} waits too little");
            // Never more than one timer step too long, and never "forever".
            let step = Duration::from_micros(RNR_TIMER_US[p.min_rnr_timer as usize] as u64);
            assert!(p.approx < Duration::from_millis(ms) * 2 + step, "{ms} ms: {p:?} waits too long");
        }
        // The suite's 100 ms: 5 x 20.48 ms.
        assert_eq!(
            rnr_params(Duration::from_millis(100)),
            RnrParams { min_rnr_timer: 22, rnr_retry: 5, approx: Duration::from_micros(102_400) }
        );
        // Beyond 6 x 655 ms the wait is capped, not infinite (rnr_retry 7).
        let big = rnr_params(Duration::from_secs(3600));
        assert_eq!((big.min_rnr_timer, big.rnr_retry), (0, 6));
        assert_eq!(big.approx, Duration::from_micros(6 * 655_360));
    }

    #[test]
    fn rnr_timer_table_is_monotonic_after_code_zero() {
        assert!(RNR_TIMER_US[1..].windows(2).all(|w| w[0] < w[1]));
        assert!(RNR_TIMER_US[0] > RNR_TIMER_US[31]);
    }

    #[test]
    fn access_flags_mapping() {
        let lw = ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0;
        let rw = ibv_access_flags::IBV_ACCESS_REMOTE_WRITE.0;
        let rr = ibv_access_flags::IBV_ACCESS_REMOTE_READ.0;
        let ra = ibv_access_flags::IBV_ACCESS_REMOTE_ATOMIC.0;
        assert_eq!((lw, rw, rr, ra), (1, 2, 4, 8));
        assert_eq!(mr_access_flags(Access::NONE), 0);
        assert_eq!(mr_access_flags(Access::LOCAL_WRITE), lw);
        assert_eq!(mr_access_flags(Access::REMOTE_READ), rr);
        // Verbs needs LOCAL_WRITE alongside REMOTE_WRITE.
        assert_eq!(mr_access_flags(Access::REMOTE_WRITE), lw | rw);
        assert_eq!(mr_access_flags(Access::REMOTE_ATOMIC), ra);
        assert_eq!(mr_access_flags(Access::ALL), lw | rw | rr | ra);
        assert_eq!(qp_access_flags(), lw | rw | rr | ra);
    }

    #[test]
    fn mtu_codes() {
        assert_eq!(mtu_bytes(ibv_mtu::IBV_MTU_256), Some(256));
        assert_eq!(mtu_bytes(ibv_mtu::IBV_MTU_4096), Some(4096));
        assert_eq!(mtu_bytes(0), None);
        assert_eq!(mtu_bytes(6), None);
    }

    #[test]
    fn qp_attributes_infiniband() {
        let rnr = rnr_params(Duration::from_secs(1));
        let p = port(LINK_LAYER_INFINIBAND, None);
        let i = init_attrs(&p);
        assert_eq!((i.port_num, i.pkey_index, i.access), (1, 0, qp_access_flags()));
        let r = rtr_attrs(&p, &peer(), &rnr).unwrap();
        assert_eq!(r.path_mtu, ibv_mtu::IBV_MTU_1024, "the smaller MTU wins");
        assert_eq!((r.dest_qp_num, r.rq_psn, r.dlid, r.port_num, r.sl), (0x1234, 0xabcdef, 9, 1, 0));
        assert_eq!(r.min_rnr_timer, rnr.min_rnr_timer);
        assert_eq!(r.max_dest_rd_atomic, 16);
        assert_eq!(r.grh, None, "InfiniBand without a GID index routes by LID");
        let s = rts_attrs(&p, &peer(), 0x1_000_001, &rnr);
        assert_eq!(s.sq_psn, 1, "PSNs are 24 bits");
        assert_eq!((s.timeout, s.retry_cnt, s.rnr_retry), (ACK_TIMEOUT, 7, rnr.rnr_retry));
        assert_eq!(s.max_rd_atomic, 4, "bounded by the peer's responder resources");
        // LID 0 without a GRH cannot be routed.
        let no_lid = PeerInfo { lid: 0, ..peer() };
        assert!(rtr_attrs(&p, &no_lid, &rnr).unwrap_err().contains("LID 0"));
        // With a GID index, InfiniBand uses a GRH too.
        let r = rtr_attrs(&port(LINK_LAYER_INFINIBAND, Some(0)), &no_lid, &rnr).unwrap();
        assert_eq!(r.grh.unwrap().dgid, peer().gid);
    }

    #[test]
    fn qp_attributes_roce() {
        let rnr = rnr_params(Duration::from_millis(100));
        let r = rtr_attrs(&port(LINK_LAYER_ETHERNET, Some(3)), &peer(), &rnr).unwrap();
        assert_eq!(r.grh, Some(Grh { dgid: peer().gid, sgid_index: 3, hop_limit: HOP_LIMIT }));
        assert!(rtr_attrs(&port(LINK_LAYER_ETHERNET, None), &peer(), &rnr).unwrap_err().contains("--gid-index"));
        let no_gid = PeerInfo { gid: [0; 16], ..peer() };
        assert!(rtr_attrs(&port(LINK_LAYER_ETHERNET, Some(1)), &no_gid, &rnr).unwrap_err().contains("no GID"));
        let bad_mtu = PeerInfo { mtu: 9, ..peer() };
        assert!(rtr_attrs(&port(LINK_LAYER_ETHERNET, Some(1)), &bad_mtu, &rnr).unwrap_err().contains("MTU"));
        // rd_atomic 0 from a peer still yields a usable value.
        let s = rts_attrs(&port(LINK_LAYER_ETHERNET, Some(1)), &PeerInfo { rd_atomic: 0, ..peer() }, 5, &rnr);
        assert_eq!(s.max_rd_atomic, 1);
    }

    #[test]
    fn gid_choice() {
        let ll = [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x02, 0x11, 0x22, 0xff, 0xfe, 0x33, 0x44, 0x55];
        let v4 = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 5];
        let global = [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
        let v1 = Some("IB/RoCE v1".to_string());
        let v2 = Some("RoCE v2".to_string());
        // mlx5 layout: v1 and v2 entries of each address.
        let table = vec![(0, ll, v1.clone()), (1, ll, v2.clone()), (2, v4, v1.clone()), (3, v4, v2.clone())];
        assert_eq!(pick_gid(&table), Some(3));
        // rxe without type information: the IPv4-mapped one.
        assert_eq!(pick_gid(&[(0, ll, None), (1, v4, None)]), Some(1));
        assert_eq!(pick_gid(&[(0, ll, None), (4, global, None)]), Some(4));
        assert_eq!(pick_gid(&[(2, ll, None), (1, ll, None)]), Some(1), "ties go to the lowest index");
        assert_eq!(pick_gid(&[(0, [0; 16], None)]), None);
        assert_eq!(pick_gid(&[]), None);
    }

    #[test]
    fn completion_status_mapping() {
        use ibv_wc_status::*;
        let cases = [
            (IBV_WC_SUCCESS, WcStatus::Success),
            (IBV_WC_LOC_LEN_ERR, WcStatus::LocalLengthError),
            (IBV_WC_LOC_PROT_ERR, WcStatus::LocalProtectionError),
            (IBV_WC_LOC_QP_OP_ERR, WcStatus::LocalProtectionError),
            (IBV_WC_WR_FLUSH_ERR, WcStatus::WrFlushError),
            (IBV_WC_REM_ACCESS_ERR, WcStatus::RemoteAccessError),
            (IBV_WC_REM_INV_REQ_ERR, WcStatus::RemoteInvalidRequest),
            (IBV_WC_REM_OP_ERR, WcStatus::RemoteInvalidRequest),
            (IBV_WC_RNR_RETRY_EXC_ERR, WcStatus::RnrRetryExceeded),
            (IBV_WC_RETRY_EXC_ERR, WcStatus::WrFlushError),
            (IBV_WC_FATAL_ERR, WcStatus::WrFlushError),
            (999, WcStatus::WrFlushError),
        ];
        for (code, want) in cases {
            assert_eq!(wc_status(code), want, "{}", wc_status_name(code));
        }
        assert_eq!(wc_status_name(IBV_WC_RETRY_EXC_ERR), "IBV_WC_RETRY_EXC_ERR");
        assert_eq!(wc_status_name(12345), "unknown ibv_wc_status");
    }

    #[test]
    fn errno_mapping_and_messages() {
        assert_eq!(errno_of(12, 0), 12, "verbs that return the errno");
        assert_eq!(errno_of(-1, 22), 22, "-1 with errno set");
        assert_eq!(errno_of(-95, 0), 95, "-errno");
        assert_eq!(errno_of(-1, 0), libc::EIO, "never errno 0");
        assert_eq!(errno_of(i32::MIN, 0), libc::EIO);
        assert_eq!(verb_message("ibv_create_qp", libc::ENOMEM), "ibv_create_qp: Cannot allocate memory (errno 12)");
        assert_eq!(verb_error("ibv_reg_mr", libc::EFAULT).to_string(), "transport: ibv_reg_mr: Bad address (errno 14)");
        let e = no_device_error(Some(libc::ENOSYS)).to_string();
        assert!(e.starts_with("transport: no RDMA device found; use --transport shm or tcp"), "{e}");
        assert!(e.contains("ibv_get_device_list: Function not implemented (errno 38)"), "{e}");
        assert_eq!(no_device_error(None).to_string(), "transport: no RDMA device found; use --transport shm or tcp");
    }

    #[test]
    fn async_events_fail_only_what_they_name() {
        for (kind, action) in [
            (1, AsyncAction::FailQp),
            (2, AsyncAction::FailQp),
            (3, AsyncAction::FailQp),
            (7, AsyncAction::FailQp),
            (8, AsyncAction::FailAll),
            (0, AsyncAction::Log),
            (10, AsyncAction::Log),
            (9, AsyncAction::Log),
            (4, AsyncAction::Ignore),
            (16, AsyncAction::Ignore),
            (9999, AsyncAction::Log),
        ] {
            assert_eq!(async_event(kind).1, action, "{kind}");
        }
        assert_eq!(async_event(1).0, "IBV_EVENT_QP_FATAL");
        assert_eq!(async_event(10).0, "IBV_EVENT_PORT_ERR");
        assert_eq!(async_event(12345).0, "unknown ibv_event_type");
    }
}
