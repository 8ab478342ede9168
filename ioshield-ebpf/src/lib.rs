#![no_std]
// Exists so ioshield can name this crate as a build-dependency (cargo rebuilds the BPF object
// when it changes); the programs are in the `ioshield` bin target.
