//! The help texts of the options that name the verifier's settings (the
//! accepted variants and the policy files of SEV-SNP and TDX), one text
//! each for every binary that takes them.

/// The help of an accepted-variants option.
pub const VARIANTS_HELP: &str = "Attestation variants accepted, comma-separated: qemu-vtpm (a vTPM quote, \
     checked with the measurements and AK-trust options), sev-snp (an SEV-SNP report, checked \
     with the SNP policy option), tdx (an Intel TDX quote, checked with the TDX policy option) \
     and/or azure-sev-snp (an Azure confidential VM's HCL report and vTPM quote, checked with the \
     Azure policy option). \
     Evidence of another variant is refused in the handshake";

/// The help of an SEV-SNP policy option.
pub const SNP_POLICY_HELP: &str = "SEV-SNP policy, JSON: measurement (required), minimumTcb, vmpl, \
     allowDebug, hostData, idKeyDigests, rootBundles (PEM files of pinned ARKs), vcekCacheDir, ...; \
     required when sev-snp is accepted";

/// The help of an `azure-sev-snp` policy option.
pub const AZURE_POLICY_HELP: &str = "azure-sev-snp policy, JSON: snp (an SEV-SNP policy for the \
     paravisor's report: idKeyDigests or measurement, rootBundles, minimumTcb, ...) and pcrs (the \
     vTPM's PCRs; 4, the kernel, and 9, the initrd and command line, must be enforced); required \
     when azure-sev-snp is accepted";

/// The help of a TDX policy option.
pub const TDX_POLICY_HELP: &str = "TDX policy, JSON: mrtd and rtmrs 0, 1 and 2 (required: firmware, its configuration and ACPI tables, kernel, command line and initrd), allowDebug, tdAttributes, xfam, \
     minimumTeeTcbSvn, acceptedTcbStatuses, rootCertificates, collateral (the files of Intel's TCB \
     info, QE identity and CRLs, checked as of now), expectedEventLog, ...; required when tdx is \
     accepted";
