#[pgflow::flow(slug = "outside")]
mod outside;

fn main() {}
