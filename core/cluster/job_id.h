// The job id: the name every request of a job carries, so that a process of
// one job is refused by another's coordinator and parameter servers, and the
// name under which the job's runs and logs are filed.
//
// Where it comes from, first that is set: GRADSYNC_JOB_ID (gradsync launch
// sets it; a user may), the enclosing launcher's job (Slurm's job and step,
// Open MPI's job, torchrun's run id), else nothing: worker 0's coordinator
// then makes a fresh one (NewJobId) and every other process learns it when it
// connects (CoordinatorClient::Connect). So two jobs never share an id unless
// the user gives both the same.
#pragma once

#include <string>

namespace gradsync {

// "20261124-233012-3fa9c2d1e0b4": the time (so runs sort) and 48 random bits.
std::string NewJobId();

// The job id the environment gives, by the rule above; "" when none does.
std::string JobIdFromEnvironment();

}  // namespace gradsync
