// Speed probe for the CUDA backend with random weights of the Llama-3.1-8B shape: prefill of a
// prompt, then decode steps for one sequence and for k forks of the prompt (one batch).
// Usage: kernelllm_cuda_bench [layers=32] [prompt=1500] [steps=128] [k=20] [dtype=bf16|f16] [graphs=1]
//                             [plan=auto] (a kernel plan text, src/engine/cuda_plan.h: e.g. cascade=0)
// Prints one JSON object. Timings are host wall clock around forward() calls (each returns
// after its logits are on the host), after warm-up steps (graph capture included in those).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "kernelllm/engine/cuda_backend.h"

using namespace kernelllm;

namespace {
double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
int die(const Status& s) {
  std::fprintf(stderr, "error: %s\n", s.to_string().c_str());
  return 1;
}
}  // namespace

int main(int argc, char** argv) {
  const int64_t layers = argc > 1 ? std::atoll(argv[1]) : 32;
  const int64_t prompt_len = argc > 2 ? std::atoll(argv[2]) : 1500;
  const int64_t steps = argc > 3 ? std::atoll(argv[3]) : 128;
  const int64_t k = argc > 4 ? std::atoll(argv[4]) : 20;
  const std::string dt = argc > 5 ? argv[5] : "bf16";
  const bool graphs = argc > 6 ? std::atoi(argv[6]) != 0 : true;
  ModelConfig c;
  c.architecture = "LlamaForCausalLM";
  c.hidden_size = 4096;
  c.intermediate_size = 14336;
  c.num_hidden_layers = layers;
  c.num_attention_heads = 32;
  c.num_key_value_heads = 8;
  c.head_dim = 128;
  c.vocab_size = 128256;
  c.max_position_embeddings = 131072;
  c.rope_theta = 500000.0;
  c.rope_scaling = {RopeScaling::Type::llama3, 8.0, 1.0, 4.0, 8192};
  CudaBackendOptions o;
  o.dtype = dt == "f16" ? DType::f16 : DType::bf16;
  o.cuda_graphs = graphs;
  o.plan = argc > 7 ? argv[7] : "";
  o.kv_capacity_tokens = 20 * 4096 + 4096;  // the memory bar: k = 20 x 4096 tokens
  const double t_load = now_ms();
  auto made = make_cuda_backend_random(c, 1234, o);
  if (!made.ok()) return die(made.status());
  Backend& b = **made;
  const double load_ms = now_ms() - t_load;

  std::vector<int32_t> prompt(static_cast<size_t>(prompt_len));
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int32_t>((i * 7919 + 13) % 128000);
  std::vector<float> logits;
  auto prefill = [&](SeqId s) -> Status {
    const ForwardRequest r{s, prompt, false};
    return b.forward({&r, 1}, logits);
  };
  // Warm-up prefill on a throwaway sequence, then the timed one.
  auto warm = b.create_sequence();
  if (!warm.ok()) return die(warm.status());
  if (Status s = prefill(*warm); !s.ok()) return die(s);
  b.release_sequence(*warm);
  auto root = b.create_sequence();
  if (!root.ok()) return die(root.status());
  const double t0 = now_ms();
  if (Status s = prefill(*root); !s.ok()) return die(s);
  const double prefill_ms = now_ms() - t0;

  auto decode = [&](int64_t n, double& ms_per_step) -> Status {
    std::vector<SeqId> seqs;
    for (int64_t i = 0; i < n; ++i) {
      KLLM_ASSIGN_OR_RETURN(SeqId s, b.fork_sequence(*root));
      seqs.push_back(s);
    }
    std::vector<int32_t> tok(static_cast<size_t>(n));
    std::vector<ForwardRequest> reqs(static_cast<size_t>(n));
    double start = 0;
    const int64_t warmup = 4;
    for (int64_t step = 0; step < warmup + steps; ++step) {
      if (step == warmup) start = now_ms();
      for (int64_t i = 0; i < n; ++i) {
        tok[static_cast<size_t>(i)] = static_cast<int32_t>((step * 31 + i * 17) % 128000);
        reqs[static_cast<size_t>(i)] = ForwardRequest{seqs[static_cast<size_t>(i)], {&tok[static_cast<size_t>(i)], 1}, false};
      }
      KLLM_RETURN_IF_ERROR(b.forward(reqs, logits));
    }
    ms_per_step = (now_ms() - start) / static_cast<double>(steps);
    for (SeqId s : seqs) b.release_sequence(s);
    return Status::ok_status();
  };
  double ms1 = 0, msk = 0;
  if (Status s = decode(1, ms1); !s.ok()) return die(s);
  if (Status s = decode(k, msk); !s.ok()) return die(s);
  std::printf(
      "{\"layers\": %lld, \"dtype\": \"%s\", \"graphs\": %d, \"prompt\": %lld, \"steps\": %lld, \"k\": %lld, \"setup_ms\": %.1f, "
      "\"prefill_ms\": %.2f, \"prefill_tok_s\": %.0f, \"decode1_ms_per_step\": %.3f, \"decode1_tok_s\": %.1f, "
      "\"decodek_ms_per_step\": %.3f, \"decodek_tok_s\": %.1f}\n",
      static_cast<long long>(layers), dt.c_str(), graphs ? 1 : 0, static_cast<long long>(prompt_len), static_cast<long long>(steps),
      static_cast<long long>(k), load_ms, prefill_ms, static_cast<double>(prompt_len) / prefill_ms * 1000.0, ms1,
      1000.0 / ms1, msk, static_cast<double>(k) * 1000.0 / msk);
  return 0;
}
