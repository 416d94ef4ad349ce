//! Backends behind [`crate::Communicator`].

pub mod reference;
