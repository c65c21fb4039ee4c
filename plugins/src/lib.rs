//! plugins
