// The node's actors (actor_directory.h, docs/actors.md).
#include "coordinator/actor_directory.h"

#include <signal.h>

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "gpu/device_visibility.h"
#include "ipc/task_payload.h"

namespace shoal::coordinator {
namespace {

constexpr uint32_t kMaxActorNameBytes = 200;

// An actor name with this prefix ("name:ps", shoal's A.options(name="ps"))
// is unique among the node's live actors: its worker's role in the node's
// status is "actor <id> name:ps", where shoal.get_actor finds it. A name
// without it is a label (the class's name) that any number of actors share.
constexpr absl::string_view kUniqueNamePrefix = "name:";

std::string Describe(uint32_t id, const std::string& name) {
  absl::string_view shown = name;
  absl::ConsumePrefix(&shown, kUniqueNamePrefix);
  return shown.empty() ? absl::StrCat("actor ", id)
                       : absl::StrCat("actor ", id, " (", shown, ")");
}

}  // namespace

absl::StatusOr<std::vector<int>> ActorDirectory::PickGpus(
    uint32_t count) const {
  if (count == 0) return std::vector<int>{};
  std::vector<bool> held(options_.node_gpus.size(), false);
  for (const auto& [id, a] : actors_) {
    if (a.ended) continue;
    for (int g : a.gpus) held[static_cast<size_t>(g)] = true;
  }
  std::vector<int> out;
  for (size_t g = 0; g < options_.node_gpus.size() && out.size() < count; ++g) {
    if (!held[g]) out.push_back(static_cast<int>(g));
  }
  if (out.size() < count) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the actor asks for ", count, " GPUs; the node has ",
        options_.node_gpus.size(), ", of which ",
        options_.node_gpus.size() - out.size(), " are held by other actors"));
  }
  return out;
}

ActorDirectory::ActorDirectory(Options options)
    : options_(std::move(options)) {}

absl::Status ActorDirectory::CheckCreate(
    const ActorCreator& creator, const ipc::ActorCreateRequest& m) const {
  if (m.init_function().empty() || m.init_function().size() > 80 ||
      m.name().size() > kMaxActorNameBytes) {
    return absl::InvalidArgumentError(
        "an actor needs a constructor function name of 1-80 bytes and a "
        "name of at most 200 bytes");
  }
  if (absl::StartsWith(m.name(), kUniqueNamePrefix)) {
    for (const auto& [id, other] : actors_) {
      if (!other.ended && other.name == m.name()) {
        return absl::AlreadyExistsError(absl::StrCat(
            "an actor named '", m.name().substr(kUniqueNamePrefix.size()),
            "' exists on this node: ", Describe(id, other.name),
            " (a name is free again once its actor ended)"));
      }
    }
  }
  // A detached actor outlives every session: only the owner makes one (it
  // would otherwise escape its creator's quota).
  if (m.detached() && !creator.owner) {
    return absl::PermissionDeniedError(
        "only the node's owner may create a detached actor");
  }
  if (!creator.owner) {
    uint64_t live = 0;
    for (const auto& [id, a] : actors_) {
      live += !a.ended && a.principal == creator.principal;
    }
    if (live >= options_.max_actors_per_client) {
      return absl::ResourceExhaustedError(
          absl::StrCat("this client has ", live,
                       " actors: over the limit max_actors_per_client = ",
                       options_.max_actors_per_client, " (kill one first)"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<ipc::ActorCreateReply> ActorDirectory::Create(
    const ActorCreator& creator, const ipc::ActorCreateRequest& m,
    pid_t owner_pid) {
  SHOAL_RETURN_IF_ERROR(CheckCreate(creator, m));
  // Not detached: it ends with its owner process when that is a local
  // client of this node, else with the frontend session that made it.
  const pid_t owner = m.detached() ? 0 : owner_pid;
  const uint64_t session = m.detached() || owner != 0 ? 0 : creator.session;
  SHOAL_ASSIGN_OR_RETURN(std::vector<int> gpus, PickGpus(m.gpus()));
  SHOAL_ASSIGN_OR_RETURN(std::string visible,
                         gpu::ChildVisibleDevices(options_.node_gpus, gpus));

  Actor a;
  a.id = next_actor_++;
  a.name = m.name();
  a.init_function = m.init_function();
  a.python_path = m.python_path();
  a.owner = owner;
  a.session = session;
  a.principal = creator.principal;
  a.gpus = gpus;
  a.init_object = ObjectId::Random();
  a.init_bytes = m.init().size();
  SHOAL_RETURN_IF_ERROR(options_.store->Put(
      a.init_object, TensorMeta::Bytes(static_cast<int64_t>(m.init().size())),
      m.init().data()));
  if (absl::Status s = options_.table->AddActor(a.id); !s.ok()) {
    (void)options_.store->Release(a.init_object);
    (void)options_.store->Delete(a.init_object);
    return s;
  }
  const uint32_t worker = options_.host->ReserveWorker();
  a.worker = worker;
  const uint32_t id = a.id;
  actors_.emplace(id, std::move(a));
  actor_of_worker_[worker] = id;
  // Counted in its session until EndActor.
  if (session != 0) options_.host->CountSessionActor(session, +1);
  WorkerSpec spec;
  spec.cpus = std::max<uint32_t>(1, m.cpus());
  spec.gpus = m.gpus();
  spec.visible_devices = visible;
  spec.max_restarts = static_cast<int>(m.max_restarts());
  spec.label =
      absl::StrCat("actor ", id, m.name().empty() ? "" : " ", m.name());
  absl::StatusOr<uint32_t> started = options_.supervisor->Add(std::move(spec));
  if (!started.ok() || *started != worker) {
    const absl::Status why = started.ok()
                                 ? absl::InternalError("worker ids out of step")
                                 : started.status();
    End(actors_.at(id),
        absl::StrCat("its process did not start: ", why.message()));
    return why;
  }
  SHOAL_LOG(INFO, "%s started as worker %d (owner pid %d)",
            Describe(id, m.name()), worker, owner);
  ipc::ActorCreateReply reply;
  reply.set_actor_id(id);
  reply.set_worker_id(worker);
  return reply;
}

absl::Status ActorDirectory::Kill(const ActorCreator& caller, uint32_t actor) {
  auto it = actors_.find(actor);
  // Another client's actor is reported as unknown, as another's task is.
  if (it == actors_.end() ||
      (!caller.owner && it->second.principal != caller.principal))
    return absl::NotFoundError(absl::StrCat("no actor ", actor));
  if (!it->second.ended) End(it->second, "it was killed (shoal.kill)");
  return absl::OkStatus();
}

absl::Status ActorDirectory::MayCall(const std::string& principal,
                                     uint32_t actor) const {
  auto a = actors_.find(actor);
  if (a == actors_.end() || a->second.principal != principal) {
    return absl::PermissionDeniedError(
        absl::StrCat("actor ", actor, " is not this client's"));
  }
  return absl::OkStatus();
}

void ActorDirectory::EndOfSession(uint64_t session) {
  for (auto& [id, a] : actors_) {
    if (!a.ended && a.session == session && session != 0)
      End(a, "its client's session ended");
  }
}

absl::StatusOr<ActorDirectory::Start> ActorDirectory::BeforeStart(
    uint32_t worker) {
  Actor& a = actors_.at(actor_of_worker_.at(worker));
  if (a.ended) return absl::FailedPreconditionError("the actor has ended");
  SHOAL_ASSIGN_OR_RETURN(const uint32_t slot,
                         options_.table->AddWorker(
                             0, 1, static_cast<uint32_t>(a.gpus.size()), a.id));
  // The constructor runs first, ahead of calls queued while it restarted.
  tasks::TaskSubmission init;
  init.function = tasks::ActorFunction(a.init_function, a.id);
  init.max_retries = 0;
  init.at_head = true;
  ObjectValue arg;
  arg.id = a.init_object;
  arg.meta = TensorMeta::Bytes(static_cast<int64_t>(a.init_bytes));
  arg.nbytes = a.init_bytes;
  init.args = ipc::EncodeTaskArgs({Value{arg}}, a.python_path);
  absl::StatusOr<std::vector<uint64_t>> ids =
      options_.table->Submit(options_.own_client, {init});
  if (!ids.ok()) {
    (void)options_.table->RemoveWorker(slot);
    return ids.status();
  }
  a.init_task = (*ids)[0];
  return Start{slot,
               {{"SHOAL_WORKER_SLOT", absl::StrCat(slot)},
                {"SHOAL_ACTOR_ID", absl::StrCat(a.id)},
                {"RANK", absl::StrCat(worker)},
                {"LOCAL_RANK", absl::StrCat(worker)}}};
}

void ActorDirectory::OnWorkerExit(uint32_t worker, int32_t slot,
                                  const std::string& how) {
  Actor& a = actors_.at(actor_of_worker_.at(worker));
  const bool restarting = options_.supervisor->WillRestart(a.worker);
  if (slot >= 0) {
    // Ended first (killed, constructor failed, owner gone): the call that
    // was running fails for that reason, not for the SIGKILL that followed.
    const std::string died =
        a.ended ? a.end_message
                : absl::StrCat(Describe(a.id, a.name), " died (", how,
                               ") while running this call");
    // Not gated on RunningOn: that reads the slot without the table's lock,
    // and a process SIGKILLed inside Complete has cleared it already while
    // its journal still holds the undo. FailRunning's lock rolls that back
    // first and then fails the call; the gate would have skipped it and left
    // the call running forever (RemoveWorker cleared the slot). NotFound:
    // it ran nothing.
    (void)options_.table->FailRunning(
        static_cast<uint32_t>(slot),
        static_cast<int32_t>(absl::StatusCode::kUnavailable),
        ipc::EncodeTaskOutcome(died, {}));
    (void)options_.table->RemoveWorker(static_cast<uint32_t>(slot));
  }
  if (a.ended) return;
  if (restarting) {
    SHOAL_LOG(WARNING, "%s died (%s); restarting it", Describe(a.id, a.name),
              how);
    return;
  }
  End(a,
      absl::StrCat("its process died (", how, ") and it has no restarts left"));
}

void ActorDirectory::CheckInits() {
  for (auto& [id, a] : actors_) {
    if (!a.init_task) continue;
    absl::StatusOr<tasks::TaskState> state = options_.table->Poll(*a.init_task);
    if (state.ok() && *state != tasks::TaskState::kDone) continue;
    absl::StatusOr<tasks::TaskOutcome> out = options_.table->Take(
        options_.own_client, *a.init_task, /*release=*/true);
    a.init_task.reset();
    if (!out.ok() || out->code == 0 || a.ended) continue;
    absl::StatusOr<ipc::TaskOutcomeBody> body =
        ipc::DecodeTaskOutcome(out->result);
    const std::string message =
        body.ok() ? body->message : std::string(body.status().message());
    // A constructor that died with its process is the exit's business
    // (restarts); one that raised ends the actor.
    if (out->code == static_cast<int32_t>(absl::StatusCode::kUnavailable))
      continue;
    End(a, absl::StrCat("its constructor failed: ", message));
  }
}

void ActorDirectory::End(Actor& a, const std::string& why) {
  a.ended = true;
  const std::string message =
      absl::StrCat(Describe(a.id, a.name), " has ended: ", why);
  a.end_message = message;
  SHOAL_LOG(INFO, "%s", message);
  absl::Status s = options_.table->EndActor(
      a.id, static_cast<int32_t>(absl::StatusCode::kUnavailable),
      ipc::EncodeTaskOutcome(message, {}));
  if (!s.ok()) SHOAL_LOG(WARNING, "ending actor %d: %s", a.id, s.ToString());
  options_.supervisor->Retire(a.worker);
  (void)options_.store->Release(a.init_object);
  (void)options_.store->Delete(a.init_object);
  if (a.session != 0) options_.host->CountSessionActor(a.session, -1);
}

void ActorDirectory::EndOwnedBy(pid_t pid) {
  for (auto& [id, a] : actors_) {
    if (!a.ended && a.owner == pid)
      End(a, absl::StrCat("its owner (pid ", pid, ") exited"));
  }
}

}  // namespace shoal::coordinator
