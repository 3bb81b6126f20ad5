// Internal to coordinator/: the node's actors (docs/actors.md).
//
// An actor is a worker process of its own, supervised like a pool worker,
// and a class of its own in the task table that only that process claims
// from. The directory makes an actor (its class, its constructor argument in
// the store, its process), queues the constructor call first in its class at
// every (re)start, and ends it when it is killed, when its owner process
// exits, when its frontend session ends, when its constructor fails, or when
// it dies with no restarts left. Method calls never pass through here:
// clients submit them to the table like any task, named
// "<function>@actor=<id>" (tasks::ActorFunction).
//
// Thread-compatible: the coordinator's event loop makes every call.
#ifndef SHOAL_COORDINATOR_ACTOR_DIRECTORY_H_
#define SHOAL_COORDINATOR_ACTOR_DIRECTORY_H_

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "coordinator/supervisor.h"
#include "ipc/messages.h"
#include "shm/store_client.h"
#include "tasks/task_table.h"

namespace shoal::coordinator {

// Who asks to make or kill an actor.
struct ActorCreator {
  std::string principal;  // Principal key
  uint64_t session = 0;   // the frontend's serial of the creating session
  bool owner = false;     // the node's owner
};

class ActorDirectory {
 public:
  // What the directory needs of the coordinator.
  class Host {
   public:
    virtual ~Host() = default;
    // Reserves the supervisor id of the next worker process (the one
    // Supervisor::Add starts next); it has no task-table slot yet.
    virtual uint32_t ReserveWorker() = 0;
    // Frontend session `session` gained (+1) or lost (-1) a live actor,
    // which counts against its quota.
    virtual void CountSessionActor(uint64_t session, int delta) = 0;
  };

  struct Options {
    // REQUIRES: each outlives the directory.
    Host* host = nullptr;
    tasks::TaskTable* table = nullptr;
    uint32_t own_client = 0;  // the table client constructor calls go through
    shm::StoreClient* store = nullptr;  // holds constructor arguments
    Supervisor* supervisor = nullptr;
    std::vector<std::string> node_gpus;   // the node's GPUs, in logical order
    uint64_t max_actors_per_client = 16;  // a non-owner's live actors
  };

  explicit ActorDirectory(Options options);

  // Makes an actor and starts its process. `owner_pid` is the local client
  // process it ends with (0: none; it then ends with `creator`'s session
  // unless the request asks for a detached one). Errors: InvalidArgument (a
  // bad name or constructor), AlreadyExists (a live actor has the unique
  // name), PermissionDenied (a detached actor asked by a non-owner),
  // ResourceExhausted (over max_actors_per_client, or GPUs held), the
  // store's and the table's errors, and the process start's.
  absl::StatusOr<ipc::ActorCreateReply> Create(const ActorCreator& creator,
                                               const ipc::ActorCreateRequest& m,
                                               pid_t owner_pid);
  // Ends actor `actor`. Errors: NotFound when it does not exist or is not
  // the caller's (unless the caller is the owner).
  absl::Status Kill(const ActorCreator& caller, uint32_t actor);
  // Whether `principal` made actor `actor`. Errors: PermissionDenied naming
  // the actor.
  absl::Status MayCall(const std::string& principal, uint32_t actor) const;
  // Ends the live actors that frontend session `session` made (not detached).
  void EndOfSession(uint64_t session);
  // Ends the live actors that local client process `pid` owns.
  void EndOwnedBy(pid_t pid);

  // Whether supervisor worker `worker` is an actor's process.
  bool IsActorWorker(uint32_t worker) const {
    return actor_of_worker_.count(worker) != 0;
  }

  // What an actor's process starts with.
  struct Start {
    uint32_t slot = 0;  // its task-table slot
    std::map<std::string, std::string> env;
  };
  // The supervisor's before_start for an actor's process: takes a
  // task-table slot in the actor's class and queues the constructor call
  // first in it. REQUIRES: IsActorWorker(worker). Errors: FailedPrecondition
  // when the actor has ended; the table's.
  absl::StatusOr<Start> BeforeStart(uint32_t worker);
  // An actor's process exited. `slot` is the task-table slot it held (-1:
  // none): the call it ran fails, and the slot is removed. The actor ends
  // unless the supervisor restarts the process. REQUIRES:
  // IsActorWorker(worker).
  void OnWorkerExit(uint32_t worker, int32_t slot, const std::string& how);
  // Takes finished constructor calls: a failed one ends its actor.
  void CheckInits();

 private:
  struct Actor {
    uint32_t id = 0;
    uint32_t worker = 0;  // the supervisor's id of its process
    std::string name;
    std::string init_function;
    std::string python_path;
    ObjectId init_object;  // the constructor's argument, held by us
    uint64_t init_bytes = 0;
    // What it ends with: its owner process (a local client), or the
    // frontend session that made it; neither: detached (lives until killed
    // or the node stops; the owner's only).
    pid_t owner = 0;
    uint64_t session = 0;
    std::string principal;  // who made it (Principal key): who may call it
    std::vector<int> gpus;  // the node's logical GPUs it holds
    std::optional<uint64_t> init_task;  // the constructor call in flight
    bool ended = false;
    std::string end_message;  // why it ended, for the call it was running
  };

  // Admission: the name, detached, and the creator's quota.
  absl::Status CheckCreate(const ActorCreator& creator,
                           const ipc::ActorCreateRequest& m) const;
  absl::StatusOr<std::vector<int>> PickGpus(uint32_t count) const;
  // Ends an actor: fails its queued calls with `why`, kills its process,
  // drops its constructor argument.
  void End(Actor& a, const std::string& why);

  Options options_;
  std::map<uint32_t, Actor> actors_;              // by actor id
  std::map<uint32_t, uint32_t> actor_of_worker_;  // supervisor id → actor
  uint32_t next_actor_ = 1;
};

}  // namespace shoal::coordinator

#endif  // SHOAL_COORDINATOR_ACTOR_DIRECTORY_H_
