// Coordinator: brings up one node of a job — hosts the node's store service,
// creates the task table, forks+execs the worker processes (each with its own
// GPUs through CUDA_VISIBLE_DEVICES), supervises them, and serves clients on a
// ZeroMQ ROUTER over TCP (tasks, status, stop). Local clients submit through
// the shared-memory task table directly; remote ones through the frontend.
#ifndef SHOAL_COORDINATOR_COORDINATOR_H_
#define SHOAL_COORDINATOR_COORDINATOR_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "ipc/connection_guard.h"
#include "shm/store_service.h"

namespace shoal::coordinator {

struct CoordinatorOptions {
  // Job id (names segments, sockets, discovery). Default "": a fresh one.
  std::string job_id;
  // Worker processes. Default 2.
  int num_workers = 2;
  // CPUs each worker offers to tasks' resource requests. Default 1.
  int cpus_per_worker = 1;
  // GPUs per worker, from the coordinator's visible GPUs (its own
  // CUDA_VISIBLE_DEVICES, --gpus, or the driver's count). Default 0.
  int gpus_per_worker = 0;
  // Overrides the visible GPU list ("0,1", "GPU-…"). Default: none.
  std::optional<std::string> gpus;
  // Store size. Default 0: the store's default.
  uint64_t store_bytes = 0;
  // Where the store spills objects when it is full, and the most bytes it
  // spills: shm::StoreOptions::spill_dir and spill_bytes, with their
  // defaults (the job's runtime folder; half the free space there).
  std::string spill_dir;
  uint64_t spill_bytes = shm::StoreOptions::kSpillBytesAuto;
  // Plugins every worker loads.
  std::vector<std::string> plugins;
  // Directories every worker's embedded Python searches for modules first
  // (put in front of the workers' PYTHONPATH). Default: none.
  std::vector<std::string> python_path;
  // Frontend address, HOST:PORT (port 0: pick a free one). Default
  // "127.0.0.1:0". A non-loopback host requires CURVE unless `insecure`.
  std::string bind = "127.0.0.1:0";
  bool insecure = false;
  // CURVE: the server's key-pair file (created if missing; default
  // <job dir>/server.key) and a file of allowed client public keys (one Z85
  // key per line). Used when binding off loopback.
  std::string server_key_file;
  std::string client_keys_file;
  // Worker command. Default: this executable with the argument "worker".
  std::vector<std::string> worker_command;
  // Where worker logs go. Default: <job dir>/logs.
  std::string log_dir;
  // A worker without a heartbeat this long is killed as hung. Default 10 s.
  absl::Duration heartbeat_timeout = absl::Seconds(10);
  // After a task's timeout its worker gets this long to stop before it is
  // killed. Default 2 s.
  absl::Duration cancel_grace = absl::Seconds(2);
  // Results of remote clients not collected in this long are freed. Default
  // 10 min.
  absl::Duration remote_result_ttl = absl::Minutes(10);
  // Module prefixes `py:` tasks and actors submitted through the frontend may
  // name ("a" admits a and a.b; empty: any). With a list, pickled functions
  // (`py:=<object id>`) are refused too: a pickle can run any code.
  std::vector<std::string> allowed_modules;
  // Per frontend client: tasks queued or running, results held (finished, not
  // released), and store bytes of the results it holds. Going over one is
  // ResourceExhausted naming the limit. The store bytes are also the limit
  // of the client's store account, which the store charges as its tasks
  // write their outputs: a task whose output would cross it fails with
  // ResourceExhausted, so no batch holds more than the limit.
  uint64_t max_queued_per_client = 24576;
  uint64_t max_held_per_client = 24576;
  uint64_t max_store_bytes_per_client = uint64_t{1} << 30;
  // Bytes of replies kept for one client session: not yet written to its
  // connection, or (resumable sessions) not yet acknowledged. A session over
  // it has its further requests parked and its results left in the task
  // table until it reads: back-pressure, never loss. Default 16 MiB.
  uint64_t max_reply_bytes_per_client = 16 << 20;
  // Requests a client may have parked, in number and in bytes; more breaks
  // the protocol (a client keeps a window) and its connection is closed
  // (a resumable session survives it). Defaults 65536 and 64 MiB.
  uint64_t max_parked_requests_per_client = 65536;
  uint64_t max_parked_bytes_per_client = uint64_t{64} << 20;
  // Pending waits per client, and the task ids they name in all. Defaults
  // 1024 and 65536.
  uint64_t max_waits_per_client = 1024;
  uint64_t max_wait_ids_per_client = 65536;
  // Live actors a client that is not the owner may have. Default 16.
  uint64_t max_actors_per_client = 16;
  // Sessions one client may have open at once. Default 256.
  uint64_t max_sessions_per_client = 256;
  // How long a resumable session outlives its closed connection (its tasks
  // run on; its results wait for it). Default 60 s.
  absl::Duration resume_grace = absl::Seconds(60);
  // The largest request frame the frontend serves (libzmq closes the
  // connection of one over twice this). Default 64 MiB.
  uint64_t max_request_bytes = uint64_t{64} << 20;
  // ZeroMQ I/O threads of the coordinator's process (ipc::SetProcessIoThreads):
  // they move every connection's bytes and run CURVE's encryption and
  // handshakes, each new connection on the thread that serves the fewest, so
  // one client's replies do not wait behind every other client's handshakes
  // and large frames. Takes effect when the coordinator's process has no
  // socket before it starts (`shoal start`). Default 2.
  int io_threads = 2;
  // How old the store's figures in the status a client other than the
  // owner asks for may be: for them the store's object table is scanned at
  // most once in this time, each scan under the store's lock, so that a
  // client sending status requests without pause does not hold up every
  // process's reads of the store. The owner's status scans afresh.
  // Default 100 ms.
  absl::Duration status_store_refresh = absl::Milliseconds(100);
  // The TCP frontend's connections: at most max_connections at once (new
  // ones are held off meanwhile), max_per_client per client key (not the
  // owner's), handshakes in progress capped per address, and a connection
  // that sends no request closed after first_request_within
  // (ipc/connection_guard.h).
  ipc::ConnectionLimits connection_limits;
};

class Coordinator {
 public:
  // Starts everything (store, task table, workers, sockets, discovery file).
  // Errors: InvalidArgument (bad options, too many GPUs asked for, a
  // non-loopback bind without CURVE keys or --insecure), and start failures.
  static absl::StatusOr<std::unique_ptr<Coordinator>> Create(
      CoordinatorOptions options);
  // Stops workers and the store, removes segments, sockets and discovery.
  ~Coordinator();

  // Serves until Stop() or a StopRequest. Returns OK after a clean stop.
  absl::Status Run();
  // Makes Run() return soon. Thread-safe and async-signal-safe.
  void Stop();

  const std::string& job_id() const;
  // The owner's ipc:// endpoint (in the job folder) and the TCP one.
  const std::string& frontend_endpoint() const;
  const std::string& tcp_endpoint() const;
  const std::string& store_endpoint() const;

  class Impl;

 private:
  explicit Coordinator(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace shoal::coordinator

#endif  // SHOAL_COORDINATOR_COORDINATOR_H_
