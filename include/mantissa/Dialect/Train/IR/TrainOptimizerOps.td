//===- TrainOptimizerOps.td - Optimizer updates ------------*- tablegen -*-===//
//
// The fused optimizer updates of shard groups.
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_DIALECT_TRAIN_IR_TRAINOPTIMIZEROPS_TD
#define MANTISSA_DIALECT_TRAIN_IR_TRAINOPTIMIZEROPS_TD

include "mantissa/Dialect/Train/IR/TrainAttrs.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

/// A flat byte buffer of a shard group: members are addressed by byte offset.
def Train_ByteBuffer : MemRefRankOf<[I8], [1]>;

def Train_AdamWUpdateOp : Train_Op<"adamw_update", [AttrSizedOperandSegments]> {
  let summary = "fused AdamW update of one shard group over flat buffers";
  let description = [{
    Performs one step of torch's single-tensor AdamW (decoupled weight decay)
    for every member of a shard group, in one pass over memory. The group's
    state lives in flat byte buffers, one per role:

    - `grad`: the gradients (read), in each member's reduce dtype;
    - `param`: the parameter copies (written; read when they are their own
      master), in each member's gather dtype;
    - `master`: the fp32 master weights of the members that have one, or
      their 16-bit remainders (`remainder` masters);
    - `exp_avg`, `exp_avg_sq` and, with `amsgrad`, `max_exp_avg_sq`: the
      moments, in each member's moments dtype.

    Every member says how many elements it has, and for each buffer its dtype
    and its byte offset there (a multiple of 16, so that 128-bit accesses are
    aligned). Members of one group may differ in every dtype:

    - no master: the parameter is updated in its own dtype, as torch does
      (`grad` may be narrower than an fp32 parameter; it is widened exactly).
      A bf16 or fp16 parameter without master computes every step in fp32 and
      rounds after each in-place operation, exactly as torch's CPU kernels;
    - `master fp32`: the fp32 master and fp32 moments are updated, the
      gradient is widened in registers, and the parameter copy is the master
      rounded to nearest-even;
    - `master remainder` (bf16 parameters, the plan's `master = fp32_split`):
      the master is stored as the bf16 parameter, rounded to nearest-even as
      an fp32 master's copy is, plus the 16-bit remainder that makes it
      exact; the one tie those 16 bits cannot tell apart is marked by the
      sign bit of the member's `exp_avg_sq`, which is never negative. The
      update and the parameter copy are bit-identical to an fp32 master's
      (Transformer Engine's encoding rounds exact ties away from zero
      instead).

    The scalars are runtime values, so a learning-rate schedule recompiles
    nothing: `lr`, `beta1`, `beta2`, `eps` and `weight_decay` as Python floats
    (f64), and `step`, the 1-based count of this update. The bias corrections
    are computed from them in f64, as torch's Python code does. `amsgrad` and
    `maximize` are compile-time options.

    `grad_scale(%s)` (f32) multiplies every gradient before it is used and
    rounds the product to the gradient's dtype, as the in-place `grad.mul_`
    of torch.nn.utils.clip_grad_norm_ does: gradient clipping costs no pass
    of its own over the gradients.

    `slice(%part, %parts)` restricts the op to the part-th of `parts`
    disjoint slices of the group, tiles [part * T / parts, (part + 1) * T /
    parts) of its T tiles, so that one update can be split across workers
    or data-parallel ranks (on both targets).

    ```mlir
    train.adamw_update members [
        "w"    4099 {grad = fp32 at 0, param = fp32 at 0, moments = fp32 at 0},
        "emb"  4099 {grad = bf16 at 16400, param = bf16 at 16400,
                     master = fp32 at 0, moments = fp32 at 16400}
      ]
      grad(%g : memref<24608xi8>) param(%p : memref<24608xi8>)
      master(%m : memref<16400xi8>)
      exp_avg(%m1 : memref<32800xi8>) exp_avg_sq(%m2 : memref<32800xi8>)
      lr(%lr) beta1(%b1) beta2(%b2) eps(%eps) weight_decay(%wd) step(%step)
    ```
  }];
  let arguments = (ins
    Arg<Train_ByteBuffer, "gradients", [MemRead]>:$grad,
    Arg<Train_ByteBuffer, "parameter copies", [MemRead, MemWrite]>:$param,
    Arg<Optional<Train_ByteBuffer>, "fp32 masters or remainders",
        [MemRead, MemWrite]>:$master,
    Arg<Train_ByteBuffer, "first moments", [MemRead, MemWrite]>:$exp_avg,
    Arg<Train_ByteBuffer, "second moments", [MemRead, MemWrite]>:$exp_avg_sq,
    Arg<Optional<Train_ByteBuffer>, "running maxima of the second moments",
        [MemRead, MemWrite]>:$max_exp_avg_sq,
    F64:$lr,
    F64:$beta1,
    F64:$beta2,
    F64:$eps,
    F64:$weight_decay,
    I64:$step,
    Optional<F32>:$grad_scale,
    Optional<Index>:$part,
    Optional<Index>:$parts,
    ArrayAttr:$members,
    UnitAttr:$amsgrad,
    UnitAttr:$maximize);
  let assemblyFormat = [{
    (`amsgrad` $amsgrad^)? (`maximize` $maximize^)?
    `members` custom<AdamWMembers>($members)
    `grad` `(` $grad `:` type($grad) `)`
    `param` `(` $param `:` type($param) `)`
    (`master` `(` $master^ `:` type($master) `)`)?
    `exp_avg` `(` $exp_avg `:` type($exp_avg) `)`
    `exp_avg_sq` `(` $exp_avg_sq `:` type($exp_avg_sq) `)`
    (`max_exp_avg_sq` `(` $max_exp_avg_sq^ `:` type($max_exp_avg_sq) `)`)?
    `lr` `(` $lr `)` `beta1` `(` $beta1 `)` `beta2` `(` $beta2 `)`
    `eps` `(` $eps `)` `weight_decay` `(` $weight_decay `)` `step` `(` $step `)`
    (`grad_scale` `(` $grad_scale^ `)`)?
    (`slice` `(` $part^ `,` $parts `)`)?
    attr-dict
  }];
  let extraClassDeclaration = [{
    /// How a member stores its master weights.
    enum class MasterKind { None, FP32, Remainder };

    /// One member of the group, decoded from its dictionary in `members`.
    struct Member {
      std::string name;
      int64_t count = 0;
      DType grad = DType::fp32;
      DType param = DType::fp32;
      MasterKind master = MasterKind::None;
      DType moments = DType::fp32;
      int64_t gradOffset = 0;
      int64_t paramOffset = 0;
      int64_t masterOffset = 0;
      int64_t momentsOffset = 0;

      /// Bytes per element of the member's entry in the master buffer.
      unsigned getMasterByteWidth() const {
        return master == MasterKind::Remainder ? 2 : 4;
      }
      /// Whether the update rounds to the parameter's dtype after each
      /// in-place operation (a bf16/fp16 parameter that is its own master).
      bool isLowPrecisionArm() const {
        return master == MasterKind::None && param != DType::fp32;
      }
    };

    /// Byte alignment of every member offset (one 128-bit access).
    static constexpr int64_t kMemberAlignment = 16;

    /// The members, decoded. Only valid on a verified op.
    SmallVector<Member> getMemberList();

    /// Encodes members as the `members` attribute.
    static ArrayAttr buildMembersAttr(MLIRContext *context,
                                      ArrayRef<Member> members);

    /// Decodes one member dictionary; null on malformed input, with a
    /// message in `error`.
    static std::optional<Member> decodeMember(Attribute attr,
                                              std::string &error);

    // Custom assembly of the member list (found by the generated parser and
    // printer as static members of the op).
    static ParseResult parseAdamWMembers(OpAsmParser &parser,
                                         ArrayAttr &members);
    static void printAdamWMembers(OpAsmPrinter &printer, Operation *op,
                                  ArrayAttr members);
  }];
  let hasVerifier = 1;
}

#endif // MANTISSA_DIALECT_TRAIN_IR_TRAINOPTIMIZEROPS_TD
