// examples/data_parallel: data-parallel training of an MLP under
// `shoal launch`. See README.md in this folder.
//
//   shoal launch --nproc-per-node 2 -- data_parallel --steps 600
//   shoal launch --nproc-per-node gpu -- data_parallel
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "base/status_macros.h"
#include "collectives/communicator.h"
#include "examples/data_parallel/backend.h"
#include "examples/data_parallel/job_setup.h"
#include "examples/data_parallel/model.h"
#include "examples/data_parallel/report.h"
#include "examples/data_parallel/train.h"
#include "launch/job.h"
#include "tools/cli/args.h"

namespace shoal::dp {
namespace {

struct Flags {
  ModelSpec spec;
  TrainOptions train;
  int64_t batch = 64;
  int64_t samples = 65536;
  int64_t seed = 1;
  std::string device = "auto";
  std::string out_dir;
  std::string csv, plot, compare;
  bool png = true;
  bool overlap_set = false;  // --overlap or --no-overlap given
  std::string overlap_why;   // for the log
};

absl::Status ParseFlags(int argc, char** argv, Flags& f) {
  cli::ArgParser p(
      "shoal launch --nproc-per-node N|gpu -- data_parallel [flags]",
      "Trains an MLP on a synthetic regression task (a fixed random teacher\n"
      "network) with one process per rank: the data set is shared through the\n"
      "node's store, gradients are averaged in buckets overlapped with "
      "backward\n"
      "(shm collectives on the CPU, NCCL on GPUs), and the ranks' parameters "
      "are\n"
      "checked to stay bit-identical. Rank 0 prints the loss and samples/s "
      "and\n"
      "writes a CSV and a PNG of the loss curve.");
  int64_t& steps = p.Int("steps", 600, "optimizer steps");
  int64_t& batch = p.Int("batch", 64, "samples per rank and step");
  double& lr = p.Double("lr", 0.05, "SGD learning rate");
  double& momentum = p.Double("momentum", 0.9, "SGD momentum");
  int64_t& d_in = p.Int("inputs", 128, "input features");
  int64_t& hidden = p.Int("hidden", 1024, "width of the hidden layers");
  int64_t& layers = p.Int("layers", 3, "linear layers: 2 or 3");
  int64_t& d_out = p.Int("outputs", 32, "regression targets");
  int64_t& samples = p.Int("samples", 65536, "data set size");
  int64_t& seed =
      p.Int("seed", 1, "seed of the data set and the initial model");
  std::string& device = p.String("device", "auto", "auto, cpu or gpu");
  uint64_t& bucket = p.Bytes("bucket-bytes", 25 << 20, "gradient bucket size");
  uint64_t& first = p.Bytes("first-bucket-bytes", 1 << 20,
                            "size of the first bucket (the last layer's)");
  bool& overlap = p.Bool("overlap", true,
                         "all-reduce buckets during backward (default: on "
                         "GPUs, and on the CPU when every rank has a core to "
                         "spare)");
  int64_t& check =
      p.Int("check-every", 50,
            "compare the ranks' parameter checksums every N steps");
  int64_t& log = p.Int("log-every", 50, "print the loss every N steps");
  int64_t& warmup = p.Int("warmup", 10, "steps left out of samples/s");
  std::string& out_dir =
      p.String("out-dir", "data_parallel_out", "where the CSV and PNG go");
  std::string& csv =
      p.String("csv", "", "the CSV (default OUT_DIR/loss_<R>x<B>.csv)");
  std::string& plot =
      p.String("plot", "", "the PNG (default OUT_DIR/loss.png)");
  std::string& compare =
      p.String("compare", "",
               "other runs' CSVs (comma-separated) to overlay in the PNG");
  bool& png = p.Bool("png", true, "render the PNG (needs gnuplot)");
  int64_t& diverge = p.Int("diverge-at", -1,
                           "testing: rank 1 perturbs its update at this step");
  SHOAL_RETURN_IF_ERROR(p.Parse(argc, argv));
  if (!p.positional().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("unexpected argument '", p.positional()[0], "'"));
  }
  f.spec = {.d_in = static_cast<int>(d_in),
            .hidden = static_cast<int>(hidden),
            .layers = static_cast<int>(layers),
            .d_out = static_cast<int>(d_out)};
  SHOAL_RETURN_IF_ERROR(f.spec.Validate());
  if (batch < 1 || steps < 1) {
    return absl::InvalidArgumentError("--batch and --steps must be positive");
  }
  f.train.steps = steps;
  f.train.lr = static_cast<float>(lr);
  f.train.momentum = static_cast<float>(momentum);
  f.train.check_every = check;
  f.train.log_every = log;
  f.train.warmup = warmup;
  f.train.diverge_at = diverge;
  f.train.sync = {.bucket_bytes = static_cast<int64_t>(bucket),
                  .first_bucket_bytes = static_cast<int64_t>(first),
                  .overlap = overlap};
  f.batch = batch;
  f.samples = samples;
  f.seed = seed;
  f.device = device;
  f.out_dir = out_dir;
  f.csv = csv;
  f.plot = plot;
  f.compare = compare;
  f.png = png;
  f.overlap_set = p.seen("overlap");
  return absl::OkStatus();
}

std::string Mib(int64_t bytes) {
  return cli::FormatBytes(static_cast<uint64_t>(bytes));
}

void PrintHeader(const launch::Job& job, const Flags& f, const Backend& backend,
                 const DeviceChoice& choice, const Shard& shard, int buckets) {
  const ParamLayout layout(f.spec);
  std::printf(
      "data_parallel: %d rank%s x batch %lld (global %lld) on %s; %s\n"
      "  model %s: %lld parameters, %s of gradients in %d bucket%s "
      "(first %s, then up to %s; overlap %s)\n"
      "  data: %lld samples (%s) in the node's store, read in place; %lld "
      "global batches per epoch\n",
      job.world_size(), job.world_size() == 1 ? "" : "s",
      static_cast<long long>(f.batch),
      static_cast<long long>(f.batch * job.world_size()),
      backend.Describe().c_str(), choice.why.c_str(), f.spec.ToString().c_str(),
      static_cast<long long>(layout.params()),
      Mib(4 * layout.grad_elems()).c_str(), buckets, buckets == 1 ? "" : "s",
      Mib(f.train.sync.first_bucket_bytes).c_str(),
      Mib(f.train.sync.bucket_bytes).c_str(),
      job.world_size() == 1
          ? "n/a, 1 rank"
          : absl::StrCat(f.train.sync.overlap ? "on" : "off",
                         f.overlap_why.empty() ? "" : ": ", f.overlap_why)
                .c_str(),
      static_cast<long long>(f.samples),
      Mib(4 * f.samples * (f.spec.d_in + f.spec.d_out)).c_str(),
      static_cast<long long>(shard.batches_per_epoch));
  std::fflush(stdout);
}

// Rank 0's epilogue: summary, CSV, PNG.
absl::Status Report(const launch::Job& job, const Flags& f,
                    const Backend& backend, const TrainResult& r) {
  const int world = job.world_size();
  const bool gpu = backend.on_device();
  const std::string checks =
      world == 1 ? std::string("one rank: no parameters to compare")
                 : absl::StrCat("parameters bit-identical across ranks at ",
                                r.checks, r.checks == 1 ? " check" : " checks");
  std::printf(
      "done: %lld steps, final loss %.6f (first %.6f); %.0f samples/s (%.0f "
      "per rank), %.2f ms/step of which %.2f ms waiting for gradients; %s\n",
      static_cast<long long>(r.steps.size()), r.steps.back().loss,
      r.steps.front().loss, r.samples_per_second, r.samples_per_second / world,
      r.step_ms, r.wait_ms, checks.c_str());
  std::printf(
      "summary: ranks=%d batch=%lld global_batch=%lld device=%s steps=%lld "
      "samples_per_s=%.1f step_ms=%.3f wait_ms=%.3f final_loss=%.7g "
      "buckets=%d overlap=%d checks=%d\n",
      world, static_cast<long long>(f.batch),
      static_cast<long long>(f.batch * world), gpu ? "cuda" : "cpu",
      static_cast<long long>(r.steps.size()), r.samples_per_second, r.step_ms,
      r.wait_ms, r.steps.back().loss, r.buckets, f.train.sync.overlap ? 1 : 0,
      r.checks);

  std::error_code ec;
  std::filesystem::create_directories(f.out_dir, ec);
  const std::string dir = std::filesystem::absolute(f.out_dir).string();
  const std::string csv =
      f.csv.empty() ? absl::StrCat(dir, "/loss_", world, "x", f.batch, ".csv")
                    : std::filesystem::absolute(f.csv).string();
  const RunInfo info{world, static_cast<int>(f.batch), gpu ? "cuda" : "cpu"};
  SHOAL_RETURN_IF_ERROR(WriteCsv(csv, r.steps, info));
  std::printf("csv:  %s\n", csv.c_str());
  if (!f.png) return absl::OkStatus();

  std::vector<Curve> curves;
  SHOAL_ASSIGN_OR_RETURN(Curve mine, ReadCsv(csv, f.train.warmup));
  curves.push_back(std::move(mine));
  for (absl::string_view other :
       absl::StrSplit(f.compare, ',', absl::SkipEmpty())) {
    SHOAL_ASSIGN_OR_RETURN(Curve c,
                           ReadCsv(std::string(other), f.train.warmup));
    curves.push_back(std::move(c));
  }
  const std::string png = f.plot.empty()
                              ? absl::StrCat(dir, "/loss.png")
                              : std::filesystem::absolute(f.plot).string();
  const std::string title = absl::StrFormat(
      "shoal data-parallel training: MLP %s, SGD lr %g momentum %g",
      f.spec.ToString(), f.train.lr, f.train.momentum);
  if (absl::Status s = PlotLoss(png, curves, title); !s.ok()) {
    std::printf("plot: not rendered: %s\n", std::string(s.message()).c_str());
    return absl::OkStatus();  // the CSV holds the curve all the same
  }
  std::printf("plot: %s\n", png.c_str());
  return absl::OkStatus();
}

absl::Status Run(launch::Job& job, Flags& f) {
  const std::string prefix = absl::StrCat("dp/", job.restart_count());
  f.train.kv_prefix = prefix;
  Shard shard{job.rank(), job.world_size(), static_cast<int>(f.batch), 0};
  shard.batches_per_epoch = f.samples / (f.batch * job.world_size());
  if (shard.batches_per_epoch < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--samples ", f.samples, " is less than one global batch (",
        f.batch * job.world_size(), ")"));
  }
  SHOAL_ASSIGN_OR_RETURN(DeviceChoice choice,
                         ChooseDevice(job, f.device, prefix));
  SHOAL_ASSIGN_OR_RETURN(
      SharedDataset data,
      SharedDataset::Open(job, f.spec, f.samples, static_cast<uint64_t>(f.seed),
                          prefix));
  if (!f.overlap_set) {
    const OverlapChoice o =
        ChooseOverlap(choice.gpu, UsableCpus(), job.local_world_size());
    f.train.sync.overlap = o.on;
    f.overlap_why = o.why;
  }
  std::unique_ptr<collectives::Communicator> comm;
  if (job.world_size() > 1) {
    collectives::CommunicatorOptions co;
    co.cuda_device = choice.device;
    SHOAL_ASSIGN_OR_RETURN(comm, collectives::Communicator::Create(job, co));
  }
  const std::vector<float> initial =
      InitialParams(f.spec, static_cast<uint64_t>(f.seed) + 1);
  std::unique_ptr<Backend> backend;
  if (choice.gpu) {
    SHOAL_ASSIGN_OR_RETURN(backend, MakeGpuBackend(f.spec, shard, data.view(),
                                                   initial, choice.device));
  } else {
    SHOAL_ASSIGN_OR_RETURN(backend,
                           MakeCpuBackend(f.spec, shard, data.view(), initial));
  }
  if (comm != nullptr) {
    // As DDP: every rank starts from rank 0's parameters (the seeds agree
    // already; this makes it so whatever the initialisation).
    collectives::CallOptions call;
    call.backend = choice.gpu ? collectives::CollectiveBackend::kNccl
                              : collectives::CollectiveBackend::kShm;
    SHOAL_RETURN_IF_ERROR(comm->Broadcast(backend->params(), backend->params(),
                                          ParamLayout(f.spec).params(),
                                          DType::kF32, 0, call));
  }
  if (job.rank() == 0) {
    PrintHeader(job, f, *backend, choice, shard,
                static_cast<int>(
                    MakeBuckets(ParamLayout(f.spec).grad_elems(), f.train.sync)
                        .size()));
  }
  SHOAL_ASSIGN_OR_RETURN(TrainResult result, Train(job, comm.get(), *backend,
                                                   f.spec, shard, f.train));
  SHOAL_RETURN_IF_ERROR(job.Barrier());  // nobody reads the data set now
  SHOAL_RETURN_IF_ERROR(data.Close());
  if (job.rank() == 0) SHOAL_RETURN_IF_ERROR(Report(job, f, *backend, result));
  return absl::OkStatus();
}

}  // namespace
}  // namespace shoal::dp

int main(int argc, char** argv) {
  shoal::dp::Flags flags;
  if (absl::Status s = shoal::dp::ParseFlags(argc, argv, flags); !s.ok()) {
    if (absl::IsCancelled(s)) return 0;  // --help
    std::fprintf(stderr, "data_parallel: %s\n",
                 std::string(s.message()).c_str());
    return 2;
  }
  absl::StatusOr<std::unique_ptr<shoal::launch::Job>> job =
      shoal::launch::Init();
  if (!job.ok()) {
    std::fprintf(stderr, "data_parallel: %s\n",
                 job.status().ToString().c_str());
    return 1;
  }
  if (absl::Status s = shoal::dp::Run(**job, flags); !s.ok()) {
    std::fprintf(stderr, "data_parallel: rank %d: %s\n", (*job)->rank(),
                 s.ToString().c_str());
    return 1;
  }
  return 0;
}
