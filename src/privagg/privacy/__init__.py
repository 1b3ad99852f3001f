"""Privacy calibration and accounting: closed forms from the papers and exact numeric calibrators."""

from .guarantee import PrivacyGuarantee

__all__ = ["PrivacyGuarantee"]
