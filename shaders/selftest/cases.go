package selftest

// Cases is every self-test, each kernel of petal/shaders in at least one.
func Cases() []Case {
	return append([]Case{
		qmvCase(4), qmvCase(8), qmvMultiCase(4), qmvMultiCase(8), qmvSwiGLUCase(),
		qmvExpertsSwiGLUCase(), embedCase(),
		rmsnormCase(), addRMSNormCase(), routerCase(), argmaxCase(),
		qmmCase(4, 5), qmmCase(8, 5), qmmCase(4, 40), qmmCase(8, 40), moeGroupedCase(3), moeGroupedCase(40), swigluCase(),
		attnPrepCase(), attnDecodeCase(), attnPrefillCase(),
		deltaConvRowsCase(), deltaScanCase(),
		sampleCase(),
		qmvAddCase(4), qmvAddCase(8), normQMVMultiCase(4), normQMVMultiCase(8), normQMVSwiGLUCase(),
		normQMVExpertsRoutedCase(), moeDownCombineCase(), deltaStepConvCase(),
		qmvRowsCase(4), qmvRowsCase(8), qmvRowsSwiGLUCase(), qmvRowsExpertsCase(), moeRowsDownCase(),
	}, visionCases()...)
}
