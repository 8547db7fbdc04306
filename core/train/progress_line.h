// Worker 0's progress line on the console: step, epoch, loss, throughput,
// time left.
#pragma once

#include <cstdint>
#include <string>

namespace gradsync {

// "step 120/938  epoch 1/2  loss 0.5123  4210 samples/s  ETA 0:00:11";
// `epoch` counts from 1.
std::string ProgressLine(int64_t step, int64_t total_steps, int64_t epoch,
                         int64_t epochs, double loss,
                         double global_samples_per_s, double eta_seconds);

// In a terminal the line updates in place (`final_line` ends it); through
// the launcher's pipes every line is printed whole.
void PrintProgressLine(const std::string& line, bool final_line);

}  // namespace gradsync
