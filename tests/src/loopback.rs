//! An axum app served on a free port of 127.0.0.1, on a thread of its own, until dropped: the
//! stand-in servers of the tests (`fake_hub`, `capture`) run on it.

use std::net::SocketAddr;

use axum::Router;

pub struct Loopback {
    pub address: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Loopback {
    pub fn serve(app: Router) -> Self {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let address = listener.local_addr().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                // Stopping drops the runtime, and with it every open connection.
                tokio::select! {
                    served = axum::serve(listener, app) => served.unwrap(),
                    _ = stopped => {}
                }
            });
        });
        Self {
            address,
            stop: Some(stop),
            thread: Some(thread),
        }
    }
}

impl Drop for Loopback {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
