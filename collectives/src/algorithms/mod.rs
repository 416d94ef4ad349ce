//! Collective algorithms over a [`crate::transport::Transport`].
