//! Every call into libibverbs, behind owning handles. This file holds the backend's
//! `unsafe` code but one call: `mod.rs` registers a region of a mapping it keeps alive
//! (`reg_mr`, with its `// SAFETY:` reason); the rest of the module works with the safe
//! types below.
//!
//! Ownership mirrors the verbs object graph, so resources are released in the order
//! verbs requires: a [`RawQp`] holds `Arc`s of its two [`RawCq`]s and of the [`Hca`];
//! a [`RawCq`] and a [`RawMr`] hold the [`Hca`]; the [`Hca`] owns the device context
//! and the protection domain. Dropping a handle destroys its object first, then its
//! fields release what it depended on: queue pairs go before their completion queues,
//! memory regions and queue pairs before the protection domain, the protection domain
//! before the device context, and a completion queue before its completion channel.
//!
//! libibverbs objects may be used from any thread ("libibverbs is thread safe", verbs
//! man pages), which is what the `Send`/`Sync` implementations below rely on.

use std::ffi::CStr;
use std::os::raw::{c_int, c_void};
use std::ptr::{null_mut, NonNull};
use std::sync::Arc;
use std::time::Duration;

use rdma_sys::{
    ___ibv_query_port, atomic_t, ibv_access_flags, ibv_ack_async_event, ibv_ack_cq_events, ibv_alloc_pd,
    ibv_async_event, ibv_close_device, ibv_comp_channel, ibv_context, ibv_cq, ibv_create_comp_channel, ibv_create_cq,
    ibv_create_qp, ibv_dealloc_pd, ibv_dereg_mr, ibv_destroy_comp_channel, ibv_destroy_cq, ibv_destroy_qp, ibv_device,
    ibv_device_attr, ibv_free_device_list, ibv_get_async_event, ibv_get_cq_event, ibv_get_device_list,
    ibv_get_device_name, ibv_gid, ibv_modify_qp, ibv_mr, ibv_open_device, ibv_pd, ibv_poll_cq, ibv_port_attr,
    ibv_post_recv, ibv_post_send, ibv_qp, ibv_qp_attr, ibv_qp_attr_mask, ibv_qp_init_attr, ibv_qp_state, ibv_qp_type,
    ibv_query_device, ibv_query_gid, ibv_recv_wr, ibv_reg_mr, ibv_req_notify_cq, ibv_resize_cq, ibv_send_flags,
    ibv_send_wr, ibv_sge, ibv_wc, ibv_wc_flags, ibv_wr_opcode, rdma_t,
};
use rdma_sys::{bind_mw_t, ibv_alloc_mw, ibv_dealloc_mw, ibv_device_cap_flags, ibv_mw, ibv_mw_bind_info, ibv_mw_type};

use super::attr::{errno_of, no_device_error, verb_error, InitAttrs, RtrAttrs, RtsAttrs};
use crate::error::{Error, Result};
use crate::transport::log_event;

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// Turns a verb's int return code into a result naming the verb and the errno.
fn check(verb: &str, rc: c_int) -> Result<()> {
    if rc == 0 {
        Ok(())
    } else {
        Err(verb_error(verb, errno_of(rc, errno())))
    }
}

/// The error of a verb that returned NULL (errno set).
fn null_error(verb: &str) -> Error {
    verb_error(verb, errno_of(-1, errno()))
}

/// The list `ibv_get_device_list` returns, freed on drop.
struct DeviceList {
    list: NonNull<*mut ibv_device>,
    n: usize,
}

impl DeviceList {
    fn get() -> Result<DeviceList> {
        let mut n: c_int = 0;
        // SAFETY: ibv_get_device_list only writes the count into `n` and returns NULL
        // (errno set) or an array of `n` device pointers that we own until
        // ibv_free_device_list (Drop).
        let p = unsafe { ibv_get_device_list(&mut n) };
        match NonNull::new(p) {
            None => Err(no_device_error(Some(errno_of(-1, errno())))),
            Some(list) => Ok(DeviceList { list, n: n.max(0) as usize }),
        }
    }

    fn device(&self, i: usize) -> *mut ibv_device {
        assert!(i < self.n);
        // SAFETY: `i < n` and the array holds `n` device pointers while the list lives.
        unsafe { *self.list.as_ptr().add(i) }
    }

    fn names(&self) -> Vec<String> {
        (0..self.n)
            .map(|i| {
                // SAFETY: a device pointer of the live list; the name it returns is a
                // NUL-terminated string owned by the device (or NULL).
                let name = unsafe { ibv_get_device_name(self.device(i)) };
                if name.is_null() {
                    format!("device{i}")
                } else {
                    // SAFETY: non-NULL, NUL-terminated, alive as long as the list.
                    unsafe { CStr::from_ptr(name) }.to_string_lossy().into_owned()
                }
            })
            .collect()
    }
}

impl Drop for DeviceList {
    fn drop(&mut self) {
        // SAFETY: the pointer came from ibv_get_device_list and is freed once. Contexts
        // opened from its devices stay valid afterwards (ibv_get_device_list(3)).
        unsafe { ibv_free_device_list(self.list.as_ptr()) }
    }
}

/// Names of the RDMA devices on this machine (empty when there are none).
pub fn device_names() -> Result<Vec<String>> {
    Ok(DeviceList::get()?.names())
}

/// Device limits the backend sizes its queues by.
#[derive(Clone, Copy, Debug, Default)]
pub struct DeviceLimits {
    /// Work requests per queue.
    pub max_qp_wr: u32,
    /// Entries per completion queue.
    pub max_cqe: u32,
    /// Incoming RDMA READs per queue pair (responder resources).
    pub max_qp_rd_atom: u8,
    /// Outstanding RDMA READs per queue pair (initiator depth).
    pub max_qp_init_rd_atom: u8,
    /// Type-2 memory windows (`IBV_DEVICE_MEM_WINDOW_TYPE_2A` or `_2B`): a window bound
    /// by a work request of one queue pair, usable by that queue pair's peer alone.
    pub mw_type2: bool,
}

/// What `ibv_query_port` says about a port.
#[derive(Clone, Copy, Debug)]
pub struct PortAttr {
    /// `ibv_port_state` (4 = active).
    pub state: u32,
    /// Active MTU (`ibv_mtu` code).
    pub active_mtu: u32,
    /// LID.
    pub lid: u16,
    /// 1 InfiniBand, 2 Ethernet.
    pub link_layer: u8,
    /// Entries in the GID table.
    pub gid_tbl_len: u32,
}

/// An open device with one protection domain: what a transport value owns.
pub struct Hca {
    ctx: NonNull<ibv_context>,
    pd: NonNull<ibv_pd>,
    /// The device's name (e.g. `mlx5_0`, `rxe0`).
    pub name: String,
    /// Its limits.
    pub limits: DeviceLimits,
}

// SAFETY: the context and protection domain are libibverbs objects, which may be used
// from any thread; the handle itself is immutable after construction.
unsafe impl Send for Hca {}
// SAFETY: as above; every method takes `&self` and libibverbs serializes internally.
unsafe impl Sync for Hca {}

impl std::fmt::Debug for Hca {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hca").field("name", &self.name).finish()
    }
}

impl Hca {
    /// Opens `name` (or the first device) and allocates a protection domain.
    pub fn open(name: Option<&str>) -> Result<Hca> {
        let list = DeviceList::get()?;
        let names = list.names();
        if names.is_empty() {
            return Err(no_device_error(None));
        }
        let idx = match name {
            None => 0,
            Some(want) => names.iter().position(|n| n == want).ok_or_else(|| {
                Error::Transport(format!("RDMA device '{want}' not found (devices here: {})", names.join(", ")))
            })?,
        };
        // SAFETY: a device pointer of the live list. The context stays valid after the
        // list is freed.
        let ctx =
            NonNull::new(unsafe { ibv_open_device(list.device(idx)) }).ok_or_else(|| null_error("ibv_open_device"))?;
        // SAFETY: `ctx` is an open context.
        let Some(pd) = NonNull::new(unsafe { ibv_alloc_pd(ctx.as_ptr()) }) else {
            let e = null_error("ibv_alloc_pd");
            // SAFETY: nothing else uses the context we just opened.
            unsafe { ibv_close_device(ctx.as_ptr()) };
            return Err(e);
        };
        let mut hca = Hca { ctx, pd, name: names[idx].clone(), limits: DeviceLimits::default() };
        hca.limits = hca.query_device()?;
        Ok(hca)
    }

    fn query_device(&self) -> Result<DeviceLimits> {
        // SAFETY: ibv_device_attr is a plain C struct; all zeros is a valid value.
        let mut a: ibv_device_attr = unsafe { std::mem::zeroed() };
        // SAFETY: an open context and a writable attribute struct.
        check("ibv_query_device", unsafe { ibv_query_device(self.ctx.as_ptr(), &mut a) })?;
        let small = |v: c_int| v.clamp(0, u8::MAX as c_int) as u8;
        Ok(DeviceLimits {
            max_qp_wr: a.max_qp_wr.max(1) as u32,
            max_cqe: a.max_cqe.max(1) as u32,
            max_qp_rd_atom: small(a.max_qp_rd_atom),
            max_qp_init_rd_atom: small(a.max_qp_init_rd_atom),
            mw_type2: a.device_cap_flags
                & (ibv_device_cap_flags::IBV_DEVICE_MEM_WINDOW_TYPE_2A.0
                    | ibv_device_cap_flags::IBV_DEVICE_MEM_WINDOW_TYPE_2B.0)
                != 0,
        })
    }

    /// `ibv_query_port`.
    pub fn query_port(&self, port: u8) -> Result<PortAttr> {
        // SAFETY: ibv_port_attr is a plain C struct; all zeros is a valid value.
        let mut a: ibv_port_attr = unsafe { std::mem::zeroed() };
        // SAFETY: an open context and a writable attribute struct of the size the
        // extended query expects (rdma-sys passes its size).
        check("ibv_query_port", unsafe { ___ibv_query_port(self.ctx.as_ptr(), port, &mut a) })?;
        Ok(PortAttr {
            state: a.state,
            active_mtu: a.active_mtu,
            lid: a.lid,
            link_layer: a.link_layer,
            gid_tbl_len: a.gid_tbl_len.max(0) as u32,
        })
    }

    /// `ibv_query_gid`: the GID at `index` of `port`.
    pub fn query_gid(&self, port: u8, index: u32) -> Result<[u8; 16]> {
        // SAFETY: ibv_gid is a 16-byte union; all zeros is valid.
        let mut gid: ibv_gid = unsafe { std::mem::zeroed() };
        // SAFETY: an open context and a writable 16-byte GID.
        check("ibv_query_gid", unsafe { ibv_query_gid(self.ctx.as_ptr(), port, index as c_int, &mut gid) })?;
        // SAFETY: every variant of the union is 16 plain bytes.
        Ok(unsafe { gid.raw })
    }

    /// Registers `[addr, addr + len)` with `access` (`ibv_access_flags` bits). When the
    /// kernel refuses to pin the memory (EOPNOTSUPP: fsdax file systems refuse long-term
    /// pinning) it retries as an on-demand-paging region, which NICs with ODP support.
    ///
    /// # Safety
    ///
    /// The memory must stay mapped, and must not be unmapped or reused, until the
    /// returned [`RawMr`] is dropped: until then the device may read it and, with write
    /// access, write it at any time.
    pub unsafe fn reg_mr(self: &Arc<Self>, addr: *mut u8, len: usize, access: u32) -> Result<RawMr> {
        // SAFETY: the caller keeps the memory alive until the region is deregistered;
        // the protection domain is live.
        let mut mr = unsafe { ibv_reg_mr(self.pd.as_ptr(), addr.cast::<c_void>(), len, access as c_int) };
        if mr.is_null() {
            let first = errno_of(-1, errno());
            if first == libc::EOPNOTSUPP {
                let odp = access | ibv_access_flags::IBV_ACCESS_ON_DEMAND.0;
                // SAFETY: as above.
                mr = unsafe { ibv_reg_mr(self.pd.as_ptr(), addr.cast::<c_void>(), len, odp as c_int) };
            }
            if mr.is_null() {
                return Err(verb_error("ibv_reg_mr", first));
            }
        }
        let mr = NonNull::new(mr).ok_or_else(|| null_error("ibv_reg_mr"))?;
        // SAFETY: a region ibv_reg_mr just returned; its keys are plain fields.
        let (lkey, rkey) = unsafe { ((*mr.as_ptr()).lkey, (*mr.as_ptr()).rkey) };
        Ok(RawMr { mr, lkey, rkey, _hca: self.clone() })
    }

    /// A type-2 memory window of the protection domain, not yet bound: its rkey
    /// reaches nothing until a [`SendOp::Bind`] on one queue pair binds it.
    pub fn alloc_mw(self: &Arc<Self>) -> Result<RawMw> {
        // SAFETY: a live protection domain of an open context; `ibv_alloc_mw` returns
        // None (errno set) when the provider has no memory windows, NULL on failure.
        let mw = unsafe { ibv_alloc_mw(self.pd.as_ptr(), ibv_mw_type::IBV_MW_TYPE_2) }.unwrap_or(null_mut());
        let mw = NonNull::new(mw).ok_or_else(|| null_error("ibv_alloc_mw"))?;
        // SAFETY: a window ibv_alloc_mw just returned; its rkey is a plain field.
        let rkey = unsafe { (*mw.as_ptr()).rkey };
        Ok(RawMw { mw, rkey, live: true, _hca: self.clone() })
    }

    /// A completion queue of `cqe` entries with its own completion channel, whose fd is
    /// non-blocking.
    pub fn create_cq(self: &Arc<Self>, cqe: u32) -> Result<RawCq> {
        // SAFETY: an open context.
        let channel = NonNull::new(unsafe { ibv_create_comp_channel(self.ctx.as_ptr()) })
            .ok_or_else(|| null_error("ibv_create_comp_channel"))?;
        let destroy_channel = || {
            // SAFETY: the channel was just created and nothing else refers to it.
            unsafe { ibv_destroy_comp_channel(channel.as_ptr()) };
        };
        // SAFETY: a live channel; `fd` is a plain field.
        let fd = unsafe { (*channel.as_ptr()).fd };
        // SAFETY: fcntl on the channel's own open fd only changes its file status flags.
        let ok = unsafe {
            let fl = libc::fcntl(fd, libc::F_GETFL);
            fl >= 0 && libc::fcntl(fd, libc::F_SETFL, fl | libc::O_NONBLOCK) == 0
        };
        if !ok {
            let e = Error::io("fcntl(O_NONBLOCK) on the completion channel", std::io::Error::last_os_error());
            destroy_channel();
            return Err(e);
        }
        let cqe = cqe.clamp(1, self.limits.max_cqe.min(c_int::MAX as u32)) as c_int;
        // SAFETY: an open context and a live channel of that context.
        let cq = unsafe { ibv_create_cq(self.ctx.as_ptr(), cqe, null_mut(), channel.as_ptr(), 0) };
        match NonNull::new(cq) {
            Some(cq) => Ok(RawCq { cq, channel, fd, _hca: self.clone() }),
            None => {
                let e = null_error("ibv_create_cq");
                destroy_channel();
                Err(e)
            }
        }
    }

    /// A reliable-connected queue pair in the RESET state. The device may round the
    /// capacities up (or refuse an inline size); the ones it granted are returned.
    pub fn create_qp(self: &Arc<Self>, send: &Arc<RawCq>, recv: &Arc<RawCq>, want: QpCaps) -> Result<(RawQp, QpCaps)> {
        // SAFETY: ibv_qp_init_attr is a plain C struct; all zeros is a valid value.
        let mut init: ibv_qp_init_attr = unsafe { std::mem::zeroed() };
        init.send_cq = send.cq.as_ptr();
        init.recv_cq = recv.cq.as_ptr();
        init.cap.max_send_wr = want.max_send_wr;
        init.cap.max_recv_wr = want.max_recv_wr;
        init.cap.max_send_sge = 1;
        init.cap.max_recv_sge = 1;
        init.cap.max_inline_data = want.max_inline;
        init.qp_type = ibv_qp_type::IBV_QPT_RC;
        init.sq_sig_all = 0;
        // SAFETY: a live protection domain and completion queues of the same context
        // (the caller checks); ibv_create_qp writes the granted capacities back.
        let qp = unsafe { ibv_create_qp(self.pd.as_ptr(), &mut init) };
        let qp = NonNull::new(qp).ok_or_else(|| null_error("ibv_create_qp"))?;
        // SAFETY: a queue pair ibv_create_qp just returned; `qp_num` is a plain field.
        let qp_num = unsafe { (*qp.as_ptr()).qp_num };
        let got = QpCaps {
            max_send_wr: init.cap.max_send_wr,
            max_recv_wr: init.cap.max_recv_wr,
            max_inline: init.cap.max_inline_data,
        };
        Ok((RawQp { qp, qp_num, _send: send.clone(), _recv: recv.clone(), hca: self.clone() }, got))
    }

    /// True when `cq` was created on this device context.
    pub fn owns(&self, cq: &RawCq) -> bool {
        std::ptr::eq(self, Arc::as_ptr(&cq._hca))
    }
}

/// One asynchronous event of a device (`ibv_get_async_event`), already acknowledged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AsyncEvent {
    /// The `ibv_event_type` code.
    pub kind: u32,
    /// The queue pair's number, for queue-pair events.
    pub qp_num: Option<u32>,
    /// The port, for port events.
    pub port: Option<u8>,
}

/// `struct ibv_async_event` with the event type as a plain integer: a code this build's
/// enum does not know must not become an invalid Rust enum value.
#[repr(C)]
struct RawAsyncEvent {
    /// The union of `cq`, `qp`, `srq`, `wq` pointers and `port_num`.
    element: usize,
    event_type: u32,
}

impl Hca {
    /// Switches the context's asynchronous-event fd to non-blocking mode, so that
    /// [`Hca::next_async_event`] can wait with a timeout.
    pub fn async_events_nonblocking(&self) -> Result<()> {
        // SAFETY: a live context; `async_fd` is a plain field set by ibv_open_device.
        let fd = unsafe { (*self.ctx.as_ptr()).async_fd };
        // SAFETY: fcntl on the context's own fd, which stays open while `self` lives.
        let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
        // SAFETY: as above.
        if flags < 0 || unsafe { libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) } < 0 {
            return Err(Error::io("async event fd", std::io::Error::last_os_error()));
        }
        Ok(())
    }

    /// The next asynchronous event, waiting at most `timeout`; `None` when none came.
    /// The event is acknowledged before this returns (so destroying its queue pair or
    /// completion queue never waits for it).
    pub fn next_async_event(&self, timeout: Duration) -> Option<AsyncEvent> {
        // SAFETY: a live context; `async_fd` is a plain field.
        let fd = unsafe { (*self.ctx.as_ptr()).async_fd };
        let mut pfd = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
        let ms = timeout.as_millis().clamp(0, i32::MAX as u128) as c_int;
        // SAFETY: one initialized pollfd; poll only writes its `revents`.
        if unsafe { libc::poll(&mut pfd, 1, ms) } <= 0 {
            return None;
        }
        let mut ev = RawAsyncEvent { element: 0, event_type: 0 };
        let evp = (&mut ev as *mut RawAsyncEvent).cast::<ibv_async_event>();
        // SAFETY: a live context whose fd is non-blocking (returns -1 at once when no
        // event is pending); `ev` has the layout of struct ibv_async_event (a
        // pointer-sized union, then a 32-bit enum).
        if unsafe { ibv_get_async_event(self.ctx.as_ptr(), evp) } != 0 {
            return None;
        }
        let qp_event = matches!(ev.event_type, 1..=7 | 16);
        let port_event = matches!(ev.event_type, 9..=13 | 17 | 18);
        let qp_num = (qp_event && ev.element != 0).then(|| {
            // SAFETY: for queue-pair events the element is the queue pair, which cannot
            // be destroyed before the event is acknowledged (below).
            unsafe { (*(ev.element as *mut ibv_qp)).qp_num }
        });
        // The union's int member is its first bytes (little-endian: the low bits).
        let port = port_event.then_some(ev.element as u32 as u8);
        // SAFETY: the event just returned by ibv_get_async_event, acknowledged once.
        unsafe { ibv_ack_async_event(evp) };
        Some(AsyncEvent { kind: ev.event_type, qp_num, port })
    }
}

impl Drop for Hca {
    fn drop(&mut self) {
        // Every region, queue pair and completion queue holds an Arc of this handle, so
        // they are all gone: the protection domain and then the context can go.
        // SAFETY: the protection domain is ours and unused now.
        let rc = unsafe { ibv_dealloc_pd(self.pd.as_ptr()) };
        if rc != 0 {
            log_event(&super::attr::verb_message("ibv_dealloc_pd", errno_of(rc, errno())));
        }
        // SAFETY: the context is ours and nothing refers to it any more.
        let rc = unsafe { ibv_close_device(self.ctx.as_ptr()) };
        if rc != 0 {
            log_event(&super::attr::verb_message("ibv_close_device", errno_of(rc, errno())));
        }
    }
}

/// A registered memory region; deregistered on drop.
pub struct RawMr {
    mr: NonNull<ibv_mr>,
    /// Local key.
    pub lkey: u32,
    /// Remote key.
    pub rkey: u32,
    _hca: Arc<Hca>,
}

// SAFETY: a libibverbs object usable from any thread; the handle is immutable.
unsafe impl Send for RawMr {}
// SAFETY: as above.
unsafe impl Sync for RawMr {}

impl Drop for RawMr {
    fn drop(&mut self) {
        // SAFETY: the region is ours and deregistered once. When this returns the device
        // no longer touches the memory, so the owner may unmap it afterwards.
        let rc = unsafe { ibv_dereg_mr(self.mr.as_ptr()) };
        if rc != 0 {
            log_event(&super::attr::verb_message("ibv_dereg_mr", errno_of(rc, errno())));
        }
    }
}

/// A type-2 memory window; deallocated on drop, which invalidates it: from then on its
/// rkey is a remote access error, whatever queue pair it was bound to.
pub struct RawMw {
    mw: NonNull<ibv_mw>,
    /// The key it was allocated with (a bind gives it a new key byte: [`next_key`]).
    pub rkey: u32,
    /// Still allocated ([`RawMw::dealloc`] clears it).
    live: bool,
    _hca: Arc<Hca>,
}

// SAFETY: a libibverbs object usable from any thread; the handle is immutable.
unsafe impl Send for RawMw {}
// SAFETY: as above.
unsafe impl Sync for RawMw {}

impl Drop for RawMw {
    fn drop(&mut self) {
        if let Err(e) = self.release() {
            log_event(&e.to_string());
        }
    }
}

/// `rkey` with its low byte, the key a consumer chooses at each bind, advanced by one
/// (`ibv_inc_rkey`): a bind must change it, so an rkey of an earlier bind never works again.
pub fn next_key(rkey: u32) -> u32 {
    (rkey & !0xff) | (rkey.wrapping_add(1) & 0xff)
}

impl RawMw {
    /// Deallocates the window now. An error means the device refused, and the window
    /// may still be bound: the caller must then stop its queue pair some other way.
    pub fn dealloc(mut self) -> Result<()> {
        self.release()
    }

    fn release(&mut self) -> Result<()> {
        if !std::mem::replace(&mut self.live, false) {
            return Ok(());
        }
        // SAFETY: the window is ours and deallocated once (`live`); a window still bound
        // is invalidated by it (and lets go of its region and queue pair).
        check("ibv_dealloc_mw", unsafe { ibv_dealloc_mw(self.mw.as_ptr()) })
    }

    /// The work request that binds this window over `[addr, addr + len)` of `mr` with
    /// the remote `access` (`ibv_access_flags` bits) and the key `rkey`, for the queue
    /// pair it is posted on. `mr` must be registered with `IBV_ACCESS_MW_BIND` (and
    /// local write for remote write); the device checks the range against it.
    pub fn bind(&self, mr: &RawMr, addr: u64, len: u64, access: u32, rkey: u32) -> Bind {
        Bind { mw: self.mw, mr: mr.mr, addr, len, access, rkey }
    }
}

/// A type-2 window bind, as [`RawMw::bind`] makes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bind {
    mw: NonNull<ibv_mw>,
    mr: NonNull<ibv_mr>,
    addr: u64,
    len: u64,
    access: u32,
    rkey: u32,
}

/// One work completion, copied out of `ibv_wc`.
#[derive(Clone, Copy, Debug)]
pub struct Wc {
    /// `wr_id` as posted.
    pub wr_id: u64,
    /// `ibv_wc_status`.
    pub status: u32,
    /// `ibv_wc_opcode` (meaningless for errors).
    pub opcode: u32,
    /// Bytes received.
    pub byte_len: u32,
    /// The immediate (host order), for `IBV_WC_WITH_IMM`.
    pub imm: Option<u32>,
    /// The local queue pair.
    pub qp_num: u32,
}

/// A completion queue and its completion channel; both destroyed on drop.
pub struct RawCq {
    cq: NonNull<ibv_cq>,
    channel: NonNull<ibv_comp_channel>,
    fd: c_int,
    _hca: Arc<Hca>,
}

// SAFETY: libibverbs completion queues and channels may be polled, armed and read from
// any thread; the handle is immutable.
unsafe impl Send for RawCq {}
// SAFETY: as above.
unsafe impl Sync for RawCq {}

/// How many completions one `ibv_poll_cq` call takes at most.
const POLL_BATCH: usize = 16;

impl RawCq {
    /// `ibv_poll_cq`: appends up to `max` completions to `out`; returns how many.
    pub fn poll(&self, out: &mut Vec<Wc>, max: usize) -> Result<usize> {
        // SAFETY: ibv_wc is a plain C struct (with a plain union); zeros are valid.
        let mut wcs: [ibv_wc; POLL_BATCH] = unsafe { std::mem::zeroed() };
        let want = max.min(POLL_BATCH) as c_int;
        // SAFETY: a live completion queue and room for `want` entries.
        let n = unsafe { ibv_poll_cq(self.cq.as_ptr(), want, wcs.as_mut_ptr()) };
        if n < 0 {
            return Err(verb_error("ibv_poll_cq", errno_of(n, errno())));
        }
        for wc in &wcs[..n as usize] {
            let imm = if wc.wc_flags & ibv_wc_flags::IBV_WC_WITH_IMM.0 != 0 {
                // SAFETY: with IBV_WC_WITH_IMM the union holds the immediate (network order).
                Some(u32::from_be(unsafe { wc.imm_data_invalidated_rkey_union.imm_data }))
            } else {
                None
            };
            out.push(Wc {
                wr_id: wc.wr_id,
                status: wc.status,
                opcode: wc.opcode,
                byte_len: wc.byte_len,
                imm,
                qp_num: wc.qp_num,
            });
        }
        Ok(n as usize)
    }

    /// `ibv_req_notify_cq`: the next completion raises an event on the channel.
    pub fn arm(&self) -> Result<()> {
        // SAFETY: a live completion queue.
        check("ibv_req_notify_cq", unsafe { ibv_req_notify_cq(self.cq.as_ptr(), 0) })
    }

    /// Sleeps in poll(2) on the completion channel and `extra` (an eventfd) for up to
    /// `timeout`, then consumes and acknowledges any completion events. Returns whether
    /// `extra` became readable.
    pub fn sleep(&self, extra: c_int, timeout: Duration) -> bool {
        let mut fds = [
            libc::pollfd { fd: self.fd, events: libc::POLLIN, revents: 0 },
            libc::pollfd { fd: extra, events: libc::POLLIN, revents: 0 },
        ];
        let ms = timeout.as_millis().clamp(1, i32::MAX as u128) as c_int;
        // SAFETY: two initialized pollfd structs; poll only writes their `revents`.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
        if n <= 0 {
            return false;
        }
        if fds[0].revents != 0 {
            loop {
                let mut cq: *mut ibv_cq = null_mut();
                let mut ctx: *mut c_void = null_mut();
                // SAFETY: a live channel in non-blocking mode: returns -1 (EAGAIN) at once
                // when no event is pending.
                if unsafe { ibv_get_cq_event(self.channel.as_ptr(), &mut cq, &mut ctx) } != 0 {
                    break;
                }
                // SAFETY: `cq` is the completion queue the event was for (ours: the channel
                // serves only this queue); every event is acknowledged once, so
                // ibv_destroy_cq does not wait for unacknowledged events.
                unsafe { ibv_ack_cq_events(cq, 1) };
            }
        }
        fds[1].revents != 0
    }

    /// Current capacity.
    pub fn capacity(&self) -> u32 {
        // SAFETY: a live completion queue; `cqe` is a plain field.
        unsafe { (*self.cq.as_ptr()).cqe }.max(0) as u32
    }

    /// `ibv_resize_cq`; returns the new capacity.
    pub fn resize(&self, cqe: u32) -> Result<u32> {
        let cqe = cqe.min(c_int::MAX as u32) as c_int;
        // SAFETY: a live completion queue.
        check("ibv_resize_cq", unsafe { ibv_resize_cq(self.cq.as_ptr(), cqe) })?;
        Ok(self.capacity())
    }
}

impl Drop for RawCq {
    fn drop(&mut self) {
        // Queue pairs hold an Arc of their completion queues, so none uses this one.
        // SAFETY: the queue is ours, unused, with every event acknowledged.
        let rc = unsafe { ibv_destroy_cq(self.cq.as_ptr()) };
        if rc != 0 {
            log_event(&super::attr::verb_message("ibv_destroy_cq", errno_of(rc, errno())));
        }
        // SAFETY: the channel served only the queue destroyed above.
        let rc = unsafe { ibv_destroy_comp_channel(self.channel.as_ptr()) };
        if rc != 0 {
            log_event(&super::attr::verb_message("ibv_destroy_comp_channel", errno_of(rc, errno())));
        }
    }
}

/// Queue-pair capacities.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpCaps {
    /// Send queue depth.
    pub max_send_wr: u32,
    /// Receive queue depth.
    pub max_recv_wr: u32,
    /// Largest inline payload.
    pub max_inline: u32,
}

/// The local side of a scatter/gather element.
#[derive(Clone, Copy, Debug)]
pub struct Sge {
    /// Virtual address.
    pub addr: u64,
    /// Bytes.
    pub len: u32,
    /// Local key of the region holding it.
    pub lkey: u32,
}

/// Which send-queue operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SendOp {
    /// SEND.
    Send,
    /// RDMA WRITE.
    Write,
    /// RDMA WRITE with immediate.
    WriteImm,
    /// RDMA READ.
    Read,
    /// Atomic compare-and-swap: the word becomes `swap` if it equals `compare`.
    CompareSwap {
        /// Expected value.
        compare: u64,
        /// New value.
        swap: u64,
    },
    /// Atomic fetch-and-add.
    FetchAdd {
        /// Addend (wrapping).
        add: u64,
    },
    /// Binds a type-2 memory window to the queue pair it is posted on (a local
    /// operation, done in order with the requests around it).
    Bind(Bind),
}

/// Where the payload of a send-queue request comes from.
#[derive(Clone, Copy, Debug)]
pub enum Payload<'a> {
    /// Nothing (zero-length).
    None,
    /// A registered buffer.
    Sge(Sge),
    /// Bytes copied into the work request at post time (`IBV_SEND_INLINE`).
    Inline(&'a [u8]),
    /// A registered buffer copied into the work request at post time
    /// (`IBV_SEND_INLINE`; the lkey is not checked then, so the caller checks that the
    /// buffer lies inside a live, registered region of this protection domain).
    InlineSge(Sge),
}

/// One send-queue work request.
#[derive(Clone, Copy, Debug)]
pub struct SendWr<'a> {
    /// `wr_id`.
    pub wr_id: u64,
    /// Operation.
    pub op: SendOp,
    /// Local data.
    pub payload: Payload<'a>,
    /// `IBV_SEND_SIGNALED`.
    pub signaled: bool,
    /// Remote address (WRITE, WRITE_IMM, READ).
    pub remote_addr: u64,
    /// Remote key (WRITE, WRITE_IMM, READ).
    pub rkey: u32,
    /// Immediate, host order (WRITE_IMM).
    pub imm: u32,
}

/// A receive work request.
#[derive(Clone, Copy, Debug)]
pub struct RecvWr {
    /// `wr_id`.
    pub wr_id: u64,
    /// The buffer.
    pub sge: Sge,
}

/// A queue pair; destroyed on drop (before the completion queues and the protection
/// domain it holds).
pub struct RawQp {
    qp: NonNull<ibv_qp>,
    /// Its number.
    pub qp_num: u32,
    _send: Arc<RawCq>,
    _recv: Arc<RawCq>,
    hca: Arc<Hca>,
}

// SAFETY: libibverbs queue pairs may be posted to and modified from any thread (the
// providers lock each queue); the handle is immutable.
unsafe impl Send for RawQp {}
// SAFETY: as above.
unsafe impl Sync for RawQp {}

impl RawQp {
    fn modify(&self, verb: &str, attr: &mut ibv_qp_attr, mask: ibv_qp_attr_mask) -> Result<()> {
        // SAFETY: a live queue pair and an attribute struct whose masked fields are set.
        check(verb, unsafe { ibv_modify_qp(self.qp.as_ptr(), attr, mask.0 as c_int) })
    }

    /// RESET -> INIT.
    pub fn to_init(&self, a: &InitAttrs) -> Result<()> {
        // SAFETY: ibv_qp_attr is a plain C struct; all zeros is a valid value.
        let mut attr: ibv_qp_attr = unsafe { std::mem::zeroed() };
        attr.qp_state = ibv_qp_state::IBV_QPS_INIT;
        attr.pkey_index = a.pkey_index;
        attr.port_num = a.port_num;
        attr.qp_access_flags = a.access;
        let mask = ibv_qp_attr_mask::IBV_QP_STATE
            | ibv_qp_attr_mask::IBV_QP_PKEY_INDEX
            | ibv_qp_attr_mask::IBV_QP_PORT
            | ibv_qp_attr_mask::IBV_QP_ACCESS_FLAGS;
        self.modify("ibv_modify_qp(RESET->INIT)", &mut attr, mask)
    }

    /// INIT -> RTR.
    pub fn to_rtr(&self, a: &RtrAttrs) -> Result<()> {
        // SAFETY: ibv_qp_attr is a plain C struct; all zeros is a valid value.
        let mut attr: ibv_qp_attr = unsafe { std::mem::zeroed() };
        attr.qp_state = ibv_qp_state::IBV_QPS_RTR;
        attr.path_mtu = a.path_mtu;
        attr.dest_qp_num = a.dest_qp_num;
        attr.rq_psn = a.rq_psn;
        attr.max_dest_rd_atomic = a.max_dest_rd_atomic;
        attr.min_rnr_timer = a.min_rnr_timer;
        attr.ah_attr.dlid = a.dlid;
        attr.ah_attr.sl = a.sl;
        attr.ah_attr.src_path_bits = 0;
        attr.ah_attr.port_num = a.port_num;
        if let Some(g) = a.grh {
            attr.ah_attr.is_global = 1;
            attr.ah_attr.grh.dgid = ibv_gid { raw: g.dgid };
            attr.ah_attr.grh.sgid_index = g.sgid_index;
            attr.ah_attr.grh.hop_limit = g.hop_limit;
            attr.ah_attr.grh.flow_label = 0;
            attr.ah_attr.grh.traffic_class = 0;
        }
        let mask = ibv_qp_attr_mask::IBV_QP_STATE
            | ibv_qp_attr_mask::IBV_QP_AV
            | ibv_qp_attr_mask::IBV_QP_PATH_MTU
            | ibv_qp_attr_mask::IBV_QP_DEST_QPN
            | ibv_qp_attr_mask::IBV_QP_RQ_PSN
            | ibv_qp_attr_mask::IBV_QP_MAX_DEST_RD_ATOMIC
            | ibv_qp_attr_mask::IBV_QP_MIN_RNR_TIMER;
        self.modify("ibv_modify_qp(INIT->RTR)", &mut attr, mask)
    }

    /// RTR -> RTS.
    pub fn to_rts(&self, a: &RtsAttrs) -> Result<()> {
        // SAFETY: ibv_qp_attr is a plain C struct; all zeros is a valid value.
        let mut attr: ibv_qp_attr = unsafe { std::mem::zeroed() };
        attr.qp_state = ibv_qp_state::IBV_QPS_RTS;
        attr.sq_psn = a.sq_psn;
        attr.timeout = a.timeout;
        attr.retry_cnt = a.retry_cnt;
        attr.rnr_retry = a.rnr_retry;
        attr.max_rd_atomic = a.max_rd_atomic;
        let mask = ibv_qp_attr_mask::IBV_QP_STATE
            | ibv_qp_attr_mask::IBV_QP_SQ_PSN
            | ibv_qp_attr_mask::IBV_QP_TIMEOUT
            | ibv_qp_attr_mask::IBV_QP_RETRY_CNT
            | ibv_qp_attr_mask::IBV_QP_RNR_RETRY
            | ibv_qp_attr_mask::IBV_QP_MAX_QP_RD_ATOMIC;
        self.modify("ibv_modify_qp(RTR->RTS)", &mut attr, mask)
    }

    /// Any state -> ERR: outstanding work requests complete with `IBV_WC_WR_FLUSH_ERR`.
    pub fn to_error(&self) -> Result<()> {
        // SAFETY: ibv_qp_attr is a plain C struct; all zeros is a valid value.
        let mut attr: ibv_qp_attr = unsafe { std::mem::zeroed() };
        attr.qp_state = ibv_qp_state::IBV_QPS_ERR;
        self.modify("ibv_modify_qp(->ERR)", &mut attr, ibv_qp_attr_mask::IBV_QP_STATE)
    }

    /// Posts one send-queue work request.
    ///
    /// The device reads (SEND, WRITE) or writes (READ) the local buffer only through its
    /// `lkey`, which bounds it to a registered region; inline data is copied before the
    /// call returns.
    ///
    /// # Safety
    ///
    /// As [`RawQp::post_sends`].
    pub unsafe fn post_send(&self, wr: &SendWr<'_>) -> Result<()> {
        // SAFETY: the caller's promise for `wr` is the one `post_sends` asks for.
        unsafe { self.post_sends(std::slice::from_ref(wr)) }
    }

    /// Posts send requests as one chained list: one doorbell for the whole batch.
    ///
    /// # Safety
    ///
    /// Every [`Payload::InlineSge`] of `wrs` names memory valid for reads of its whole
    /// length until the call returns: the library copies inline data from the address
    /// without the lkey check that bounds every other payload, so a safe caller could
    /// otherwise have any memory of the process read (and sent). Every [`SendOp::Bind`]
    /// names a window and a region (their [`RawMw`] and [`RawMr`]) that stay allocated
    /// until the call returns.
    pub unsafe fn post_sends(&self, wrs: &[SendWr<'_>]) -> Result<()> {
        if wrs.is_empty() {
            return Ok(());
        }
        let mut sges = Vec::with_capacity(wrs.len());
        // SAFETY: ibv_send_wr is a plain C struct (with plain unions); zeros are valid.
        let mut list: Vec<ibv_send_wr> = (0..wrs.len()).map(|_| unsafe { std::mem::zeroed() }).collect();
        for (wr, w) in wrs.iter().zip(list.iter_mut()) {
            let mut flags = 0u32;
            let (sge, num_sge) = match wr.payload {
                Payload::None => (ibv_sge { addr: 0, length: 0, lkey: 0 }, 0),
                Payload::Sge(s) => (ibv_sge { addr: s.addr, length: s.len, lkey: s.lkey }, 1),
                Payload::InlineSge(s) => {
                    flags |= ibv_send_flags::IBV_SEND_INLINE.0;
                    (ibv_sge { addr: s.addr, length: s.len, lkey: s.lkey }, 1)
                }
                Payload::Inline(b) => {
                    flags |= ibv_send_flags::IBV_SEND_INLINE.0;
                    (ibv_sge { addr: b.as_ptr() as u64, length: b.len() as u32, lkey: 0 }, 1)
                }
            };
            if wr.signaled {
                flags |= ibv_send_flags::IBV_SEND_SIGNALED.0;
            }
            sges.push(sge);
            w.wr_id = wr.wr_id;
            w.num_sge = num_sge;
            w.send_flags = flags;
            w.opcode = match wr.op {
                SendOp::Send => ibv_wr_opcode::IBV_WR_SEND,
                SendOp::Write => ibv_wr_opcode::IBV_WR_RDMA_WRITE,
                SendOp::WriteImm => ibv_wr_opcode::IBV_WR_RDMA_WRITE_WITH_IMM,
                SendOp::Read => ibv_wr_opcode::IBV_WR_RDMA_READ,
                SendOp::CompareSwap { .. } => ibv_wr_opcode::IBV_WR_ATOMIC_CMP_AND_SWP,
                SendOp::FetchAdd { .. } => ibv_wr_opcode::IBV_WR_ATOMIC_FETCH_AND_ADD,
                SendOp::Bind(_) => ibv_wr_opcode::IBV_WR_BIND_MW,
            };
            match wr.op {
                SendOp::Send => {}
                SendOp::CompareSwap { compare, swap } => {
                    w.wr.atomic = atomic_t { remote_addr: wr.remote_addr, compare_add: compare, swap, rkey: wr.rkey };
                }
                SendOp::FetchAdd { add } => {
                    w.wr.atomic = atomic_t { remote_addr: wr.remote_addr, compare_add: add, swap: 0, rkey: wr.rkey };
                }
                SendOp::Write | SendOp::WriteImm | SendOp::Read => {
                    w.wr.rdma = rdma_t { remote_addr: wr.remote_addr, rkey: wr.rkey };
                }
                SendOp::Bind(b) => {
                    let bind_info =
                        ibv_mw_bind_info { mr: b.mr.as_ptr(), addr: b.addr, length: b.len, mw_access_flags: b.access };
                    w.bind_mw_tso_union.bind_mw = bind_mw_t { mw: b.mw.as_ptr(), rkey: b.rkey, bind_info };
                }
            }
            if wr.op == SendOp::WriteImm {
                w.imm_data_invalidated_rkey_union.imm_data = wr.imm.to_be();
            }
        }
        let (base, sge_base) = (list.as_mut_ptr(), sges.as_mut_ptr());
        for i in 0..wrs.len() {
            // SAFETY: `i < len` of both vectors, which are neither moved nor touched
            // through references while these pointers are in use.
            unsafe {
                let w = base.add(i);
                (*w).sg_list = sge_base.add(i);
                (*w).next = if i + 1 < wrs.len() { base.add(i + 1) } else { null_mut() };
            }
        }
        let mut bad: *mut ibv_send_wr = null_mut();
        // SAFETY: a live queue pair; the chained requests and their elements outlive the
        // call (the provider copies each request into its queue, and inline data into the
        // WQE, before returning); inline sources are checked in bounds of live memory by
        // the caller (`Payload`).
        let rc = unsafe { ibv_post_send(self.qp.as_ptr(), base, &mut bad) };
        check("ibv_post_send", rc)
    }

    /// Posts receive buffers as one chained list: one doorbell for the whole batch.
    pub fn post_recvs(&self, wrs: &[RecvWr]) -> Result<()> {
        if wrs.is_empty() {
            return Ok(());
        }
        let mut sges: Vec<ibv_sge> =
            wrs.iter().map(|w| ibv_sge { addr: w.sge.addr, length: w.sge.len, lkey: w.sge.lkey }).collect();
        // SAFETY: ibv_recv_wr is a plain C struct; zeros are valid.
        let mut list: Vec<ibv_recv_wr> = (0..wrs.len()).map(|_| unsafe { std::mem::zeroed() }).collect();
        let (base, sge_base) = (list.as_mut_ptr(), sges.as_mut_ptr());
        for (i, w) in wrs.iter().enumerate() {
            // SAFETY: `i < len` of both vectors, which are neither moved nor touched
            // through references while these pointers are in use.
            unsafe {
                let r = base.add(i);
                (*r).wr_id = w.wr_id;
                (*r).sg_list = sge_base.add(i);
                (*r).num_sge = i32::from(w.sge.len != 0);
                (*r).next = if i + 1 < wrs.len() { base.add(i + 1) } else { null_mut() };
            }
        }
        let mut bad: *mut ibv_recv_wr = null_mut();
        // SAFETY: a live queue pair; the chained requests and their elements live until
        // the call returns, and the buffers are bounded by their lkeys.
        let rc = unsafe { ibv_post_recv(self.qp.as_ptr(), base, &mut bad) };
        check("ibv_post_recv", rc)
    }

    /// The device the queue pair was created on.
    pub fn hca(&self) -> &Arc<Hca> {
        &self.hca
    }
}

impl Drop for RawQp {
    fn drop(&mut self) {
        // SAFETY: the queue pair is ours and destroyed once, before the completion
        // queues and the protection domain it holds references to.
        let rc = unsafe { ibv_destroy_qp(self.qp.as_ptr()) };
        if rc != 0 {
            log_event(&super::attr::verb_message("ibv_destroy_qp", errno_of(rc, errno())));
        }
    }
}
