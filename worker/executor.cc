#include "worker/executor.h"

#include <deque>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/log.h"
#include "ipc/task_payload.h"
#include "worker/registry.h"

namespace shoal::worker {
namespace {

class CppRunner : public TaskRunner {
 public:
  bool Handles(absl::string_view function) const override {
    return FindTask(function) != nullptr;
  }
  absl::Status Run(absl::string_view function, TaskContext& ctx) override {
    const TaskFunction* fn = FindTask(function);
    if (fn == nullptr)
      return absl::NotFoundError(absl::StrCat("no task function ", function));
    return (*fn)(ctx);
  }
  std::string Describe() const override {
    return absl::StrCat("C++: ", absl::StrJoin(RegisteredTasks(), ", "));
  }
};

// The TaskContext of one execution: owns the decoded arguments, the store
// references taken to read them, and the outputs as they are produced.
class ExecutionContext : public TaskContext {
 public:
  ExecutionContext(std::vector<Value> args, std::string python_path,
                   const tasks::TaskClaim& claim, uint32_t worker_id,
                   shm::StoreClient* store, tasks::TaskTable* table)
      : args_(std::move(args)),
        python_path_(std::move(python_path)),
        claim_(claim),
        worker_id_(worker_id),
        store_(store),
        table_(table) {}

  ~ExecutionContext() override {
    // Arguments read from the store were referenced for the function's
    // duration only.
    for (const ObjectId& id : held_) (void)store_->Release(id);
  }

  size_t num_args() const override { return args_.size(); }
  const Value& arg(size_t i) const override { return args_[i]; }

  absl::StatusOr<TensorView> TensorArg(size_t i) override {
    if (i >= args_.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("missing argument ", i, " (a tensor)"));
    }
    if (const auto* t = std::get_if<TensorValue>(&args_[i])) {
      return TensorView{t->meta,
                        reinterpret_cast<const uint8_t*>(t->data.data()),
                        t->data.size()};
    }
    if (const auto* o = std::get_if<ObjectValue>(&args_[i])) {
      if (store_ == nullptr) {
        return absl::FailedPreconditionError(
            "this worker has no store connection");
      }
      SHOAL_ASSIGN_OR_RETURN(shm::ObjectBuffer buf,
                             store_->Get(o->id, absl::Seconds(30)));
      held_.push_back(o->id);
      return TensorView{buf.meta, buf.data, buf.nbytes};
    }
    return absl::InvalidArgumentError(
        absl::StrCat("argument ", i, " must be a tensor, got ",
                     ValueKindName(args_[i]), " ", ValueToString(args_[i])));
  }

  void AddOutput(Value v) override { outputs_.push_back(std::move(v)); }

  absl::StatusOr<MutableTensorView> NewTensorOutput(
      const TensorMeta& meta) override {
    SHOAL_RETURN_IF_ERROR(meta.Validate());
    const uint64_t nbytes = static_cast<uint64_t>(meta.NumBytes());
    if (nbytes <= kInlineValueLimit) {
      outputs_.push_back(TensorValue{meta, std::string(nbytes, '\0')});
      auto& t = std::get<TensorValue>(outputs_.back());  // deque: never moves
      return MutableTensorView{meta, reinterpret_cast<uint8_t*>(t.data.data()),
                               nbytes};
    }
    if (store_ == nullptr) {
      return absl::FailedPreconditionError(
          "a large output needs the store, not connected");
    }
    const ObjectId id = ObjectId::Random();
    absl::StatusOr<shm::MutableObjectBuffer> buf =
        store_->Create(id, meta, shm::CreateOptions{claim_.account});
    if (!buf.ok()) {
      if (!shm::IsAccountLimitError(buf.status())) return buf.status();
      // The task fails with this whatever its function does with it.
      quota_error_ = absl::ResourceExhaustedError(absl::StrCat(
          "an output of ", nbytes,
          " bytes would exceed the submitting client's store quota: ",
          buf.status().message(),
          "; release or delete earlier results to make room"));
      return quota_error_;
    }
    created_.push_back(id);
    outputs_.push_back(ObjectValue{id, meta, nbytes});
    return MutableTensorView{meta, buf->data, nbytes};
  }

  bool cancelled() const override {
    return table_ != nullptr && table_->CancelRequested(claim_.id);
  }
  uint32_t attempt() const override { return claim_.attempt; }
  uint32_t worker_id() const override { return worker_id_; }
  uint64_t task_id() const override { return claim_.id; }
  shm::StoreClient* store() override { return store_; }
  absl::string_view python_path() const override { return python_path_; }
  uint32_t account() const override { return claim_.account; }

  // The refusal of an output by the task's store account, if one happened
  // (OK otherwise).
  const absl::Status& quota_error() const { return quota_error_; }

  // After the function: seals the objects it wrote and hands them to the
  // task's owner; or, on failure, aborts them.
  absl::Status FinishObjects(bool ok) {
    absl::Status first;
    for (const ObjectId& id : created_) {
      if (!ok) {
        (void)store_->Abort(id);
        continue;
      }
      absl::Status s = store_->Seal(id);
      if (s.ok() && claim_.owner_store_slot >= 0) {
        s = store_->Transfer(id,
                             static_cast<uint32_t>(claim_.owner_store_slot));
      } else if (s.ok()) {
        // No one can hold it for the owner (remote client through a
        // coordinator without a store slot): keep ours until released.
        s = absl::FailedPreconditionError(
            "the task's owner has no store connection");
      }
      if (!s.ok()) {
        (void)store_->Release(id);
        (void)store_->Delete(id);
        if (first.ok()) first = s;
      }
    }
    created_.clear();
    return first;
  }

  std::vector<Value> TakeOutputs() {
    return std::vector<Value>(std::make_move_iterator(outputs_.begin()),
                              std::make_move_iterator(outputs_.end()));
  }

 private:
  std::vector<Value> args_;
  std::string python_path_;
  const tasks::TaskClaim& claim_;
  uint32_t worker_id_;
  shm::StoreClient* store_;
  tasks::TaskTable* table_;
  std::deque<Value> outputs_;
  std::vector<ObjectId> held_;
  std::vector<ObjectId> created_;
  absl::Status quota_error_;
};

// A Python exception the runner attached to `s` goes into the outcome as
// fields (ipc::TaskException) beside the message.
TaskOutcome Failed(const absl::Status& s) {
  return TaskOutcome{
      static_cast<int32_t>(s.code()),
      ipc::EncodeTaskOutcome(s.message(), {}, ipc::TaskExceptionOf(s))};
}

}  // namespace

std::unique_ptr<TaskRunner> MakeCppRunner() {
  return std::make_unique<CppRunner>();
}

Executor::Executor(uint32_t worker_id, shm::StoreClient* store,
                   tasks::TaskTable* table,
                   std::vector<std::unique_ptr<TaskRunner>> runners)
    : worker_id_(worker_id),
      store_(store),
      table_(table),
      runners_(std::move(runners)) {}

TaskOutcome Executor::Execute(const tasks::TaskClaim& claim) {
  // A call to an actor is named "<function>@actor=<id>"; only the actor's own
  // worker claims it, and runs <function> (the actor's state lives in it).
  const std::string function = tasks::FunctionWithoutActor(claim.function);
  TaskRunner* runner = nullptr;
  for (auto& r : runners_) {
    if (r->Handles(function)) {
      runner = r.get();
      break;
    }
  }
  if (runner == nullptr) {
    std::vector<std::string> offers;
    for (auto& r : runners_) offers.push_back(r->Describe());
    return Failed(absl::NotFoundError(
        absl::StrCat("no task function '", function, "' on this worker (",
                     absl::StrJoin(offers, "; "),
                     "); load more with `shoal start --plugin lib.so`")));
  }
  absl::StatusOr<ipc::TaskArgsBody> body = ipc::DecodeTaskArgsBody(claim.args);
  if (!body.ok()) return Failed(body.status());
  ExecutionContext ctx(std::move(body->args), std::move(body->python_path),
                       claim, worker_id_, store_, table_);
  absl::Status s = runner->Run(function, ctx);
  // An output refused by the task's store account fails the task even if
  // the function went on without it.
  if (!ctx.quota_error().ok()) s = ctx.quota_error();
  if (s.ok() && ctx.cancelled()) s = absl::CancelledError("cancelled");
  absl::Status objects = ctx.FinishObjects(s.ok());
  if (s.ok() && !objects.ok()) s = objects;
  if (!s.ok()) return Failed(s);
  std::vector<Value> outputs = ctx.TakeOutputs();
  return TaskOutcome{0, ipc::EncodeTaskOutcome("", outputs)};
}

}  // namespace shoal::worker
