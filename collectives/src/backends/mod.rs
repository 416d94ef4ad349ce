//! Backends behind [`crate::Communicator`].
