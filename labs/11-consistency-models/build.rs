//! Links this lab's program and tests to libtorch (rpath, CUDA kept): see torch-link.
fn main() -> Result<(), torch_link::Error> {
    torch_link::emit().map(drop)
}
