use checkpoint_runtime::prelude::*;

struct Client {
    calls: std::cell::Cell<u32>,
}

impl Client {
    fn get(&self, url: &str) -> String {
        self.calls.set(self.calls.get() + 1);
        format!("{url} #{}", self.calls.get())
    }
}

// The client is built again after each checkpoint, but not while the
// closure (built once) borrows it.
#[workflow]
async fn crawl(ctx: &Ctx, urls: Vec<String>) -> Vec<String> {
    #[transient]
    let client = Client { calls: std::cell::Cell::new(0) };
    #[transient]
    let fetch = |url: &str| client.get(url);
    let mut pages = Vec::new();
    for url in &urls {
        pages.push(fetch(url));
        checkpoint!("fetched");
    }
    pages
}

fn main() {}
