//! The three protocols, each with its server side (handlers on the server's worker)
//! and client side (methods of [`crate::client::Client`]), generic over the transport:
//!
//! - [`boom`]: BOOM, one round trip per PUT and GET (the default);
//! - [`rdmp`]: the RDMP-KV baseline, two phases;
//! - [`rpc`]: the RDMA-KV baseline, RPC through server DRAM.
//!
//! They share the wire format ([`crate::wire`]), the log and its commit path
//! ([`crate::log`]), the index, recovery, the server's worker pool and the transport:
//! only the message flow differs, so their latencies compare the protocols alone.

pub mod boom;
pub mod rdmp;
pub mod rpc;
