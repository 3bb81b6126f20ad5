// A small command-line parser for the `shoal` subcommands: each subcommand
// declares its own flags (so `shoal X --help` lists exactly X's), and every
// mistake is an error message that says what to do.
//
//   ArgParser p("shoal store", "Runs a node's shared-memory tensor store.");
//   std::string job = p.String("job-id", "", "the job this store belongs to");
//   ...
//   if (absl::Status s = p.Parse(argc, argv); !s.ok()) ...
#ifndef SHOAL_TOOLS_CLI_ARGS_H_
#define SHOAL_TOOLS_CLI_ARGS_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace shoal::cli {

// Parses "64M", "1G", "4096", "1.5GiB", ... into bytes (K/M/G/T are powers of
// 1024). Errors: InvalidArgument naming the bad text.
absl::StatusOr<uint64_t> ParseBytes(absl::string_view text);
// "64 MiB", "1 GiB", "512 B".
std::string FormatBytes(uint64_t bytes);
// Parses a duration: a plain number is seconds ("30", "0.5"); anything else
// goes to absl::ParseDuration ("1.5s", "100ms", "2m", "1h30m").
// Errors: InvalidArgument naming the bad text (also for negative ones).
absl::StatusOr<absl::Duration> ParseSeconds(absl::string_view text);

class ArgParser {
 public:
  ArgParser(std::string usage, std::string summary);
  ~ArgParser();

  // Declares flags; the returned reference is filled by Parse().
  std::string& String(const std::string& name, std::string def,
                      std::string help);
  int64_t& Int(const std::string& name, int64_t def, std::string help);
  double& Double(const std::string& name, double def, std::string help);
  bool& Bool(const std::string& name, bool def, std::string help);
  uint64_t& Bytes(const std::string& name, uint64_t def, std::string help);
  // Parsed by ParseSeconds.
  absl::Duration& Duration(const std::string& name, absl::Duration def,
                           std::string help);
  // A one-letter alias ("-n" for "--iters").
  void Alias(char letter, const std::string& name);

  // Parses argv[1..]: flags as --name=value or --name value (bools: --name,
  // --no-name), positionals collected in order, "--" ends flag parsing (the
  // rest goes to rest()). Returns NotFound-free errors: InvalidArgument for an
  // unknown flag or a bad value; Cancelled after printing --help.
  absl::Status Parse(int argc, char** argv);

  const std::vector<std::string>& positional() const { return positional_; }
  const std::vector<std::string>& rest() const { return rest_; }
  bool seen(const std::string& name) const;
  std::string Help() const;

 private:
  struct Flag;
  template <typename T>
  T& Add(const std::string& name, T def, std::string def_text,
         std::string help);
  Flag* Find(absl::string_view name);
  absl::Status Set(Flag* f, absl::string_view value);

  std::string usage_;
  std::string summary_;
  std::vector<std::unique_ptr<Flag>> flags_;
  std::vector<std::pair<char, std::string>> aliases_;
  std::vector<std::string> positional_;
  std::vector<std::string> rest_;
};

// Prints "shoal: <message>" to stderr and returns exit code 2 (usage) or 1.
int Fail(const absl::Status& status);

}  // namespace shoal::cli

#endif  // SHOAL_TOOLS_CLI_ARGS_H_
