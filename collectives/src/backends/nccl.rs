//! The nccl backend (being written; compiled only with the `nccl` feature).
