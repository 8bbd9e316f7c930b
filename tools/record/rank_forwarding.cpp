#include "record/rank_forwarding.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string_view>
#include <system_error>

namespace sigmatrace::record {
namespace {

namespace fs = std::filesystem;

constexpr const char* kEnvListVar = "OMPI_MCA_mca_base_env_list";
constexpr std::string_view kEnvListParam = "mca_base_env_list";

std::vector<std::string> split(std::string_view list, char separator) {
    std::vector<std::string> out;
    size_t start = 0;
    while (start <= list.size()) {
        size_t end = list.find(separator, start);
        if (end == std::string_view::npos) end = list.size();
        if (end > start) out.emplace_back(list.substr(start, end - start));
        start = end + 1;
    }
    return out;
}

// `list` (entries NAME or NAME=value separated by `separator`) with every name of `names` it lacks appended.
std::string merged(std::string list, const std::vector<std::string>& names, char separator) {
    std::vector<std::string> present;
    for (const std::string& e : split(list, separator)) present.push_back(e.substr(0, e.find('=')));
    for (const std::string& n : names) {
        bool found = false;
        for (const std::string& p : present) found = found || p == n;
        if (found) continue;
        if (!list.empty() && list.back() != separator) list += separator;
        list += n;
        present.push_back(n);
    }
    return list;
}

std::string trimmed(std::string_view s) {
    const size_t b = s.find_first_not_of(" \t\r");
    if (b == std::string_view::npos) return "";
    const size_t e = s.find_last_not_of(" \t\r");
    return std::string(s.substr(b, e - b + 1));
}

// The value `name = value` gives in an Open MPI parameter file; false when the file does not set it.
bool param_in_file(const fs::path& file, std::string_view name, std::string* value) {
    std::ifstream in(file);
    std::string line;
    bool found = false;
    while (std::getline(in, line)) {
        const size_t hash = line.find('#');
        if (hash != std::string::npos) line.resize(hash);
        const size_t eq = line.find('=');
        if (eq == std::string::npos || trimmed(std::string_view(line).substr(0, eq)) != name) continue;
        *value = trimmed(std::string_view(line).substr(eq + 1));  // the last line in a file wins
        found = true;
    }
    return found;
}

std::string base_name(const std::string& path) {
    return fs::path(path).filename().string();
}

bool is_open_mpi_name(const std::string& name) {
    for (const char* n : {"orterun", "prterun", "prte", "mpirun.openmpi", "mpiexec.openmpi"})
        if (name == n) return true;
    return false;
}

// Where in `command` a `--mca mca_base_env_list LIST` names its LIST (0 when nowhere).
size_t env_list_argument(const std::vector<std::string>& command) {
    for (size_t i = 1; i + 2 < command.size(); ++i) {
        const std::string& opt = command[i];
        if ((opt == "--mca" || opt == "-mca" || opt == "--gmca" || opt == "-gmca") && command[i + 1] == kEnvListParam)
            return i + 2;
    }
    return 0;
}

// The value srun's --export is given on the command line, and where (0: not given).
size_t srun_export_argument(const std::vector<std::string>& command, bool* joined) {
    for (size_t i = 1; i < command.size(); ++i) {
        const std::string& a = command[i];
        if (a.rfind("--export=", 0) == 0) {
            *joined = true;
            return i;
        }
        if (a == "--export" && i + 1 < command.size()) {
            *joined = false;
            return i + 1;
        }
    }
    return 0;
}

std::string slurm_export(const std::string& value, const std::vector<std::string>& names) {
    if (value.empty() || value == "ALL" || value.rfind("ALL,", 0) == 0) return value;  // everything goes already
    if (value == "NONE") return merged("", names, ',');
    return merged(value, names, ',');
}

std::string joined_names(const std::vector<std::string>& names) {
    std::string s;
    for (const std::string& n : names) s += (s.empty() ? "" : " ") + n;
    return s;
}

}  // namespace

Launcher identify_launcher(const std::string& program, const Environment& env, std::string* resolved) {
    resolved->clear();
    std::error_code ec;
    fs::path found;
    if (program.find('/') != std::string::npos) {
        found = program;
    } else {
        for (const std::string& dir : split(value_of(env, "PATH"), ':')) {
            const fs::path candidate = fs::path(dir) / program;
            if (fs::is_regular_file(candidate, ec) && access(candidate.c_str(), X_OK) == 0) {
                found = candidate;
                break;
            }
        }
    }
    if (!found.empty()) {
        const fs::path real = fs::canonical(found, ec);
        *resolved = ec ? found.string() : real.string();
    }
    const std::string name = base_name(program);
    const std::string real_name = resolved->empty() ? name : base_name(*resolved);
    if (name == "srun" || real_name == "srun") return Launcher::slurm;
    if (is_open_mpi_name(name) || is_open_mpi_name(real_name)) return Launcher::open_mpi;
    // mpirun/mpiexec/oshrun of an Open MPI installation are links to orterun (4.x) or prterun (5.x); the same names
    // of MPICH or Intel MPI are other programs, which forward the whole environment by default.
    return Launcher::other;
}

std::string env_list_from_param_files(const Environment& env, const std::string& launcher_path) {
    std::vector<fs::path> files;
    if (const std::string* set = find_variable(env, "OMPI_MCA_mca_param_files")) {
        for (const std::string& f : split(std::string_view(*set).substr(sizeof("OMPI_MCA_mca_param_files")), ':'))
            files.emplace_back(f);
    } else {
        const std::string home = value_of(env, "HOME");
        if (!home.empty()) files.push_back(fs::path(home) / ".openmpi" / "mca-params.conf");
        std::string prefix = value_of(env, "OPAL_PREFIX");
        if (prefix.empty() && !launcher_path.empty()) prefix = fs::path(launcher_path).parent_path().parent_path().string();
        if (!prefix.empty()) {
            files.push_back(fs::path(prefix) / "etc" / "openmpi-mca-params.conf");
            // Distribution packages installed under /usr keep their configuration in /etc/openmpi.
            if (prefix == "/usr") files.emplace_back("/etc/openmpi/openmpi-mca-params.conf");
        }
    }
    // Earlier files take precedence over later ones (the user's over the installation's).
    for (const fs::path& f : files) {
        std::string value;
        if (param_in_file(f, kEnvListParam, &value)) return value;
    }
    return "";
}

LaunchPlan forward_to_ranks(std::vector<std::string> command, Environment env, const std::vector<std::string>& names,
                            Launcher launcher, const std::string& file_env_list) {
    LaunchPlan plan;
    const std::string list_names = joined_names(names);
    switch (launcher) {
        case Launcher::open_mpi:
            if (const size_t at = env_list_argument(command); at != 0) {
                command[at] = merged(command[at], names, ';');
                plan.how = "appended to the command line's --mca mca_base_env_list: " + list_names;
            } else if (find_variable(env, kEnvListVar) != nullptr) {
                set_variable(env, kEnvListVar, merged(value_of(env, kEnvListVar), names, ';'));
                plan.how = std::string("appended to ") + kEnvListVar + ": " + list_names;
            } else if (!file_env_list.empty()) {
                set_variable(env, kEnvListVar, merged(file_env_list, names, ';'));
                plan.how = std::string("the parameter file's mca_base_env_list plus ") + list_names + " exported as " +
                           kEnvListVar;
            } else {
                std::vector<std::string> args;
                for (const std::string& n : names) {
                    args.emplace_back("-x");
                    args.push_back(n);
                }
                command.insert(command.begin() + 1, args.begin(), args.end());
                plan.how = "-x " + list_names;
            }
            break;
        case Launcher::slurm: {
            bool joined = false;
            if (const size_t at = srun_export_argument(command, &joined); at != 0) {
                const std::string value = joined ? command[at].substr(sizeof("--export")) : command[at];
                const std::string out = slurm_export(value, names);
                command[at] = joined ? "--export=" + out : out;
                plan.how = out == value ? "srun --export exports everything" : "appended to srun --export: " + list_names;
            } else if (find_variable(env, "SLURM_EXPORT_ENV") != nullptr) {
                const std::string value = value_of(env, "SLURM_EXPORT_ENV");
                const std::string out = slurm_export(value, names);
                set_variable(env, "SLURM_EXPORT_ENV", out);
                plan.how = out == value ? "SLURM_EXPORT_ENV exports everything" : "appended to SLURM_EXPORT_ENV: " + list_names;
            } else {
                plan.how = "srun exports the whole environment";
            }
            break;
        }
        case Launcher::other:
            set_variable(env, kEnvListVar, merged(value_of(env, kEnvListVar), names, ';'));
            plan.how = std::string("appended to ") + kEnvListVar + ": " + list_names;
            break;
    }
    plan.command = std::move(command);
    plan.env = std::move(env);
    return plan;
}

}  // namespace sigmatrace::record
