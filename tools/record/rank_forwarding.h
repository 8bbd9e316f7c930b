// How the variables the tracer needs (LD_PRELOAD, the lttng-ust settings, every SIGMATRACE_*) reach ranks that a
// job launcher starts on other machines, composed with whatever the user's command line and configuration
// already do. Local ranks inherit the environment; a launcher decides what ranks elsewhere get.
//
// Open MPI (mpirun, mpiexec, orterun, oshrun, prterun as the command's first word). Its 4.1 launcher forwards the
// variables named by -x and those of the MCA parameter mca_base_env_list, but aborts when both are given
// ("orterun:conflict-env-set": -x together with OMPI_MCA_mca_base_env_list in its environment, which it also sets
// itself from a parameter file or --mca). So the names are added where the user's own forwarding already is:
//   1. --mca/-mca/--gmca/-gmca mca_base_env_list LIST on the command line: appended to LIST;
//   2. else OMPI_MCA_mca_base_env_list in the environment: appended to it;
//   3. else mca_base_env_list in an MCA parameter file (OMPI_MCA_mca_param_files, or $HOME/.openmpi/
//      mca-params.conf then the installation's openmpi-mca-params.conf): that value plus the names is exported
//      as OMPI_MCA_mca_base_env_list (the environment overrides files, and Open MPI exports the file's value
//      under that name anyway, so -x is as allowed or refused as without the tracer);
//   4. else one `-x NAME` per name right after the launcher's name, which composes with the user's -x,
//      hostfiles and tune files.
// Slurm (srun): it exports the whole environment unless --export (or SLURM_EXPORT_ENV) says otherwise; a list
// there gets the names appended, NONE becomes the names alone (SLURM_* are always exported).
// Any other command: the names are appended to OMPI_MCA_mca_base_env_list (an mpirun the command starts then
// forwards them, unless it is given -x as well: start the launcher directly under record in that case).
#pragma once

#include <string>
#include <vector>

#include "record/subprocess.h"

namespace sigmatrace::record {

enum class Launcher { other, open_mpi, slurm };

struct LaunchPlan {
    std::vector<std::string> command;
    Environment env;
    std::string how;  // one line saying how the variables reach remote ranks (printed by record)
};

// What the command's first word is: by its name, and by the name of the file it resolves to through PATH and
// symbolic links (Debian's mpirun -> /etc/alternatives/mpirun -> mpirun.openmpi -> orterun). `*resolved`: that
// file ("" when not found).
Launcher identify_launcher(const std::string& program, const Environment& env, std::string* resolved);

// The mca_base_env_list value of Open MPI's parameter files, "" when none sets it. `launcher_path`: the resolved
// launcher, whose installation's etc/openmpi-mca-params.conf is the system-wide file.
std::string env_list_from_param_files(const Environment& env, const std::string& launcher_path);

// The command and environment that forward `names` (each set in `env`) to every rank, as described above.
// `file_env_list`: env_list_from_param_files() for Open MPI.
LaunchPlan forward_to_ranks(std::vector<std::string> command, Environment env, const std::vector<std::string>& names,
                            Launcher launcher, const std::string& file_env_list);

}  // namespace sigmatrace::record
